package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	appgate "github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestAwait_ReadsAgainWhenItsConnectionComesBack cuts an awaiting agent
// off NATS, decides its call and lets the announcement go out while it is
// away, then lets it back. The agent reads the entry as soon as it has
// reconnected, instead of at its next periodic read, which by then is
// seconds away.
func TestAwait_ReadsAgainWhenItsConnectionComesBack(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	proxy := bustest.StartProxy(t, strings.TrimPrefix(g.NATSURL, "nats://"))
	var reconnected atomic.Int64 // unix nanos
	nc, err := bus.Connect(bus.ConnConfig{URLs: proxy.URL, Name: t.Name(), CredsFile: g.Creds()},
		nats.ReconnectHandler(func(*nats.Conn) { reconnected.Store(time.Now().UnixNano()) }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	agent, err := client.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	e, err := agent.Submit(ctx, bash("cut", "t1", "make deploy"))
	require.NoError(t, err)

	// The agent's reads of its entry, as toolgate's request API gets them.
	var reads atomic.Int32
	sub, err := g.NC.Subscribe(wire.APISubject(wire.EndpointGet), func(m *nats.Msg) {
		if strings.Contains(string(m.Data), e.PendingID) {
			reads.Add(1)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, g.NC.Flush())

	got := awaitAsync(agent, ctx, e.PendingID)
	// Its first read, and the periodic ones after 1s and 3s: the next is
	// 4s away.
	bustest.Eventually(t, 20*time.Second, 5*time.Millisecond, "the agent read its entry 3 times", func() (bool, any) { n := reads.Load(); return n >= 3, n })
	proxy.Cut()
	bustest.Eventually(t, 10*time.Second, time.Millisecond, "the agent disconnected", func() (bool, any) { return !nc.IsConnected(), nc.Status() })
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	bustest.WaitRelayed(t, g.JS) // announced, to nobody
	assertStillWaiting(t, got)
	proxy.Restore()

	r := receive(t, got)
	answered := time.Now()
	require.NoError(t, r.err)
	assert.Equal(t, client.Approved, r.out.Kind)
	// The reconnect handler runs on nats.go's callback goroutine, which
	// may come to it after the answer.
	bustest.Eventually(t, 10*time.Second, time.Millisecond, "the reconnect handler ran", func() (bool, any) {
		return reconnected.Load() != 0, "not yet"
	})
	back := time.Unix(0, reconnected.Load())
	assert.Less(t, answered.Sub(back), 2*time.Second, "answered %s after reconnecting", answered.Sub(back))
}

// TestAwait_CallJustSubmittedIsNotAnsweredNotFound: on a cluster, a read
// right after a submit may reach a replica that has not caught up with
// it. For a call this client has just submitted, Await takes a not-found
// for such a read and looks again; for any other, not found is the
// answer.
func TestAwait_CallJustSubmittedIsNotAnsweredNotFound(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	g := appgate.New(appgate.Config{Conn: env.Conn, Buckets: env.Buckets})
	ctx := t.Context()
	e, err := g.Submit(ctx, appgate.System, bash("ryw", "t1", "make deploy"))
	require.NoError(t, err)
	submitted := time.Now()

	// A replica behind the submit: its first reads do not find the call.
	var mu sync.Mutex
	behind := map[string]int{}
	lagging := func(n int) client.ReadFunc {
		return func(ctx context.Context, id string) (*machine.Entry, uint64, error) {
			mu.Lock()
			defer mu.Unlock()
			if behind[id] < n {
				behind[id]++
				return nil, 0, fmt.Errorf("get %s: %w", id, machine.ErrNotFound)
			}
			return g.Read(ctx, appgate.System, wire.GetRequest{PendingID: id})
		}
	}

	got := make(chan result, 1)
	go func() {
		out, err := client.AwaitSubmittedAt(ctx, env.NC, lagging(3), e.PendingID, submitted)
		got <- result{out, err}
	}()
	bustest.Eventually(t, 10*time.Second, time.Millisecond, "the agent 3 behind", func() (bool, any) { mu.Lock(); defer mu.Unlock(); return behind[e.PendingID] == 3, behind[e.PendingID] })
	_, err = g.Decide(ctx, appgate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	r := receive(t, got)
	require.NoError(t, r.err)
	assert.Equal(t, client.Approved, r.out.Kind)

	// Not submitted here: the first not-found is the answer.
	other, err := g.Submit(ctx, appgate.System, bash("ryw", "t2", "make deploy"))
	require.NoError(t, err)
	start := time.Now()
	_, err = client.AwaitWith(ctx, env.NC, lagging(1), other.PendingID)
	assert.ErrorIs(t, err, machine.ErrNotFound)
	assert.Less(t, time.Since(start), time.Second)
}

package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestServe_SIGKILLMidLoadLosesNothing kills `toolgate serve` (embedded
// NATS, relay and all) with SIGKILL while clients are writing, starts it
// again on the same data dir, and checks that every write it acknowledged
// is there and that the relay goes on from where it stopped: one event per
// stored revision, none lost, none doubled.
func TestServe_SIGKILLMidLoadLosesNothing(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	args := []string{"--data", data, "--listen", listen, "--relay-ack-wait", "1s", "--http", "127.0.0.1:0"}
	proc := startServe(t, args...)

	nc, js := servetest.Connect(t, "nats://"+listen)
	kv, err := js.KeyValue(t.Context(), wire.CallsBucket)
	require.NoError(t, err)
	m := machine.New(bus.NewKVStore(js, kv))

	// Each worker submits a call and decides it, over and over; acked
	// records the last state the server acknowledged for each entry.
	var acked sync.Map // pendingId → machine.State
	var writes atomic.Int64
	loadCtx, stopLoad := context.WithCancel(t.Context())
	g := new(errgroup.Group)
	for w := range 8 {
		g.Go(func() error {
			for i := 0; loadCtx.Err() == nil; i++ {
				ctx, cancel := context.WithTimeout(loadCtx, 2*time.Second)
				e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprintf("w%d-%d", w, i), ToolName: "deploy", CallerBotID: "bot", ConversationID: fmt.Sprint("conv-", w)})
				if err == nil {
					acked.Store(e.PendingID, e.Status)
					writes.Add(1)
					e, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: i%2 == 0, By: "alice"})
					if err == nil {
						acked.Store(e.PendingID, e.Status)
						writes.Add(1)
					}
				}
				cancel()
			}
			return nil
		})
	}
	bustest.Eventually(t, 30*time.Second, time.Millisecond, "300 writes", func() (bool, any) { n := writes.Load(); return n >= 300, n })
	proc.kill()
	stopLoad()
	require.NoError(t, g.Wait())

	startServe(t, args...)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the client reconnected", func() (bool, any) { return nc.IsConnected(), nc.Status() })

	// Every acknowledged write is there. A write in flight at the kill
	// may have landed without its ack, so an entry may be one step on.
	n := 0
	acked.Range(func(k, v any) bool {
		n++
		e, err := m.Get(t.Context(), k.(string))
		if assert.NoError(t, err, k) {
			if v.(machine.State) == machine.StatePendingApproval {
				assert.Contains(t, []machine.State{machine.StatePendingApproval, machine.StateApproved, machine.StateRejectedByUser}, e.Status, k)
			} else {
				assert.Equal(t, v, e.Status, k)
			}
		}
		return true
	})
	require.Greater(t, n, 100)

	// The relay catches up: one event per revision in the bucket.
	revisions := kvRevisions(t, js)
	bustest.WaitRelayed(t, js)
	events := eventIDs(t, js)
	assert.Len(t, events, len(revisions), "one event per revision")
	for id := range revisions {
		assert.Equal(t, 1, events[id], "event for %s", id)
	}
}

// kvRevisions lists <pendingId>:<revision> for every write in the bucket.
func kvRevisions(t *testing.T, js jetstream.JetStream) map[string]bool {
	t.Helper()
	s, err := js.Stream(t.Context(), "KV_"+wire.CallsBucket)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	revs := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		revs[fmt.Sprintf("%s:%d", strings.TrimPrefix(msg.Subject, "$KV."+wire.CallsBucket+"."), seq)] = true
	}
	return revs
}

// eventIDs counts the events in TOOL_EVENTS by id.
func eventIDs(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	s, err := js.Stream(t.Context(), wire.EventsStream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	ids := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := s.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		ids[decode[wire.Event](t, msg.Data).ID]++
	}
	return ids
}

package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	appgate "github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/natsapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestAwait_AnswersWhenTheAnnouncementIsLost: with no relay running,
// nothing announces the decision; Await still answers, from reading the
// entry again.
func TestAwait_AnswersWhenTheAnnouncementIsLost(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	g := appgate.New(appgate.Config{Conn: env.Conn, Buckets: env.Buckets})
	e, err := g.Submit(t.Context(), appgate.System, bash("lost", "t1", "make deploy"))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	// Decide only after Await's first read, so that the answer can come
	// only from a later one.
	firstRead := make(chan struct{})
	var once sync.Once
	read := func(ctx context.Context, id string) (*machine.Entry, uint64, error) {
		defer once.Do(func() { close(firstRead) })
		return g.Read(ctx, appgate.System, wire.GetRequest{PendingID: id})
	}
	got := make(chan result, 1)
	go func() {
		out, err := client.AwaitWith(t.Context(), env.NC, read, e.PendingID)
		got <- result{out, err}
	}()
	<-firstRead
	_, err = g.Decide(t.Context(), appgate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	r := receive(t, got)
	require.NoError(t, r.err)
	assert.Equal(t, client.Approved, r.out.Kind)
	assert.Equal(t, "alice", r.out.By)
}

// TestSubmit_WaitsOutARestart: a submit sent while toolgate's request API
// is down (a restart, an election) is sent again and answered once it is
// back, instead of failing the agent.
func TestSubmit_WaitsOutARestart(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	nc, _ := bustest.Connect(t, env.URLs)
	c, err := client.New(nc)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		_, err := c.Submit(t.Context(), bash("restart", "t1", "make"))
		got <- err
	}()
	// The first attempt has gone out to nothing before toolgate starts.
	bustest.Eventually(t, 10*time.Second, time.Millisecond, "the agent sent its request", func() (bool, any) { n := nc.Stats().OutMsgs; return n > 0, n })
	g := appgate.New(appgate.Config{Conn: env.Conn, Buckets: env.Buckets})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- natsapi.New(g, bustest.Logger()).Run(ctx, env.NC, "0.0.1-test") }()
	t.Cleanup(func() { cancel(); <-served })

	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the submit never got through")
	}
	e, err := g.Get(t.Context(), appgate.System, wire.GetRequest{PendingID: machine.PendingID("restart", "t1")})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status)
}

package client_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/client"
	appgate "github.com/toolgate/toolgate/gate"
	"github.com/toolgate/toolgate/machine"
)

// TestAwait_AnswersWhenTheAnnouncementIsLost: with no relay running,
// nothing announces the decision; Await still answers, from reading the
// entry again.
func TestAwait_AnswersWhenTheAnnouncementIsLost(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	g := appgate.New(appgate.Config{NC: env.NC, Buckets: env.Buckets})
	e, err := g.Submit(t.Context(), bash("lost", "t1", "make deploy"))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	// Decide only after Await's first read, so that the answer can come
	// only from a later one.
	firstRead := make(chan struct{})
	var once sync.Once
	read := func(ctx context.Context, id string) (*machine.Entry, uint64, error) {
		defer once.Do(func() { close(firstRead) })
		return g.Read(ctx, id)
	}
	got := make(chan result, 1)
	go func() {
		out, err := client.AwaitWith(t.Context(), env.NC, read, e.PendingID)
		got <- result{out, err}
	}()
	<-firstRead
	_, err = g.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	r := receive(t, got)
	require.NoError(t, r.err)
	assert.Equal(t, client.Approved, r.out.Kind)
	assert.Equal(t, "alice", r.out.By)
}

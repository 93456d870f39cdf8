package views_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
)

// watchedQueue is a work queue as a view of a feed: put files a
// revision the watch brought, loaded says the bucket is read.
func watchedQueue() (q *views.WorkQueue, put func(rev uint64, h views.CallHead), loaded func()) {
	q = views.NewWorkQueue()
	apply, loaded := q.View().Start()
	put = func(rev uint64, h views.CallHead) {
		apply(views.CallRevision{Key: h.PendingID, Revision: rev, Created: time.Now(), Head: &h})
	}
	return q, put, loaded
}

// TestWorkQueue_ARefusedClaimIsOfferedAgain: a claim refused on an entry
// that disagrees with the queue (read from a leader just elected, say)
// leaves the call in the queue, offered again a moment later, until a
// revision of the bucket says otherwise; a lease the refusal shows holds
// it back until it runs out.
func TestWorkQueue_ARefusedClaimIsOfferedAgain(t *testing.T) {
	t.Parallel()
	q, put, loaded := watchedQueue()
	put(1, views.CallHead{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"})
	put(2, views.CallHead{PendingID: "c.2", Status: machine.StateApproved, ToolName: "deploy"})
	loaded()
	tools := []string{"deploy"}
	taken := q.Take(tools, 2, nil)
	require.Len(t, taken, 2)
	assert.Empty(t, q.Take(tools, 2, nil), "taken already")

	// c.1's claim is refused on a stale read (still pending), c.2's on
	// a lease another process's claim holds for 300 ms.
	q.Refused(taken[0], &machine.Entry{PendingID: "c.1", Status: machine.StatePendingApproval}, 50*time.Millisecond)
	lease := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond) // as a lease holds it
	q.Refused(taken[1], &machine.Entry{PendingID: "c.2", Status: machine.StateExecuting, Lease: &machine.Lease{ExpiresAt: lease.UnixMilli()}}, 50*time.Millisecond)
	// next takes what is offered next, waiting for it.
	wait := make(chan struct{}, 1)
	next := func(what string) *views.WorkCall {
		t.Helper()
		for {
			if got := q.Take(tools, 2, wait); len(got) > 0 {
				require.Len(t, got, 1)
				return got[0]
			}
			select {
			case <-wait:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s never offered again", what)
			}
		}
	}
	assert.Equal(t, "c.1", next("c.1").PendingID)
	c2 := next("c.2")
	assert.Equal(t, "c.2", c2.PendingID)
	assert.False(t, time.Now().Before(lease), "c.2 offered again before the lease its refusal showed ran out")

	// A revision of the bucket is what counts: c.2 refused again, then
	// claimed, is not offered at the end of its backoff.
	q.Refused(c2, nil, time.Millisecond)
	put(3, views.CallHead{PendingID: "c.2", Status: machine.StateExecuting, ToolName: "deploy", ExecutionAttempts: 1, Idempotent: true,
		Lease: &machine.Lease{Holder: "x", ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}})
	// A tool not declared idempotent is never offered again once claimed:
	// its run may have started.
	put(4, views.CallHead{PendingID: "c.3", Status: machine.StateExecuting, ToolName: "deploy", ExecutionAttempts: 1,
		Lease: &machine.Lease{Holder: "x", ExpiresAt: time.Now().Add(-time.Hour).UnixMilli()}})
	ready, waiting, ok := q.Ready()
	assert.True(t, ok)
	assert.Equal(t, 0, ready, "c.3's lease ran out, but it is not idempotent")
	assert.Equal(t, 1, waiting, "c.2, until its lease runs out")
	assert.Equal(t, []string{"c.2", "c.3"}, q.Held("x", nil, 0), "held by its claimant")
}

// TestWorkQueue_AWriteOfItsOwnIsOfferedBeforeTheWatchBringsIt: a call
// this process approved is offered at once; the watch bringing the same
// revision, or an older one, later does not offer it again, and a write
// the watch brought already is not filed twice.
func TestWorkQueue_AWriteOfItsOwnIsOfferedBeforeTheWatchBringsIt(t *testing.T) {
	t.Parallel()
	q, put, loaded := watchedQueue()
	tools := []string{"deploy"}
	q.Wrote(&machine.Entry{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"}, 2)
	assert.Empty(t, q.Take(tools, 1, nil), "not filed before the bucket is read")

	put(1, views.CallHead{PendingID: "c.1", Status: machine.StatePendingApproval, ToolName: "deploy"})
	loaded()
	q.Wrote(&machine.Entry{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"}, 2)
	taken := q.Take(tools, 1, nil)
	require.Len(t, taken, 1, "offered before the watch brings it")
	assert.Equal(t, uint64(2), taken[0].Revision)

	put(2, views.CallHead{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"})
	assert.Empty(t, q.Take(tools, 1, nil), "the watch's copy of the write does not offer it again")
	q.Wrote(&machine.Entry{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"}, 2)
	assert.Empty(t, q.Take(tools, 1, nil), "nor does a write the watch brought already")

	// Ahead by two revisions: the watch's older one is passed over.
	q.Wrote(&machine.Entry{PendingID: "c.1", Status: machine.StateCompletedSuccess, ToolName: "deploy"}, 4)
	put(3, views.CallHead{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"})
	assert.Empty(t, q.Take(tools, 1, nil), "revision 3 is behind what was written here")
	put(4, views.CallHead{PendingID: "c.1", Status: machine.StateCompletedSuccess, ToolName: "deploy"})
	put(5, views.CallHead{PendingID: "c.1", Status: machine.StateApproved, ToolName: "deploy"})
	assert.Len(t, q.Take(tools, 1, nil), 1, "once caught up, the watch files revisions again")
}

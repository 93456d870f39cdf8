package machine_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
)

// countingStore counts the reads of a store that remembers entries.
type countingStore struct {
	*bus.KVStore
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, id string) (*machine.Entry, uint64, error) {
	s.gets.Add(1)
	return s.KVStore.Get(ctx, id)
}

// ClaimAt a work item's revision claims with no read when the store
// remembers the entry at it (it wrote it), is right when what it
// remembers is no longer the entry (a stale approval is not claimed: the
// entry was cancelled since), and reads a revision it did not write.
func TestClaimAt_StartsFromTheRememberedRevisionAndIsRightWhenItIsStale(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	store := &countingStore{KVStore: bus.NewKVStore(env.JS, env.KV)}
	m := machine.New(store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	other := machine.New(bus.NewKVStore(env.JS, env.KV)) // another process: remembers nothing of m's
	rev := func(id string) uint64 {
		_, r, err := env.Store.Get(ctx, id)
		require.NoError(t, err)
		return r
	}

	e, err := m.Submit(ctx, call("claimat", "fresh"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	before := store.gets.Load()
	got, err := m.ClaimAt(ctx, e.PendingID, rev(e.PendingID), "exec-1", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, machine.StateExecuting, got.Status)
	assert.Equal(t, before, store.gets.Load(), "claimed with one compare-and-set, no read")
	_, err = m.Heartbeat(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	got, err = m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`{"ok":true}`)})
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.Equal(t, before, store.gets.Load(), "its heartbeat and outcome start from the claim this store wrote")

	renewed, err := m.Submit(ctx, call("claimat", "renewed-elsewhere"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, renewed.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	_, err = m.ClaimAt(ctx, renewed.PendingID, rev(renewed.PendingID), "exec-1", time.Minute)
	require.NoError(t, err)
	_, err = other.Heartbeat(ctx, renewed.PendingID, "exec-1", time.Minute) // through another process
	require.NoError(t, err)
	got, err = m.Complete(ctx, renewed.PendingID, machine.Outcome{Holder: "exec-1"})
	require.NoError(t, err, "what this store remembers is a revision behind: read again")
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	require.NotNil(t, got.LastTransition)

	stale, err := m.Submit(ctx, call("claimat", "cancelled"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, stale.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	approvedAt := rev(stale.PendingID)
	_, err = other.Cancel(ctx, stale.PendingID, "system", "stopped")
	require.NoError(t, err)
	_, err = m.ClaimAt(ctx, stale.PendingID, approvedAt, "exec-1", time.Minute)
	var te *machine.TransitionError
	require.ErrorAs(t, err, &te, "the entry as it is now refuses")
	assert.Equal(t, machine.StateCancelled, te.Entry.Status)

	late, err := m.Submit(ctx, call("claimat", "approved-elsewhere"))
	require.NoError(t, err)
	_, err = other.Decide(ctx, late.PendingID, machine.Decision{Approve: true, By: "bob"})
	require.NoError(t, err)
	before = store.gets.Load()
	got, err = m.ClaimAt(ctx, late.PendingID, rev(late.PendingID), "exec-1", time.Minute)
	require.NoError(t, err, "a revision m did not write is read")
	assert.Equal(t, machine.StateExecuting, got.Status)
	assert.Equal(t, before+1, store.gets.Load())
}

// TestIndexedStore_SubmitAndDecideWithoutReads: with the index of the
// bucket, a new call is written with no read before, and a decision
// starts from the index's revision: one compare-and-set. What the index
// holds may be behind; a decision then acts on the entry as it is (a
// call cancelled elsewhere is not approved), and a retry of a call the
// index does not hold yet is still that call.
func TestIndexedStore_SubmitAndDecideWithoutReads(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	x := views.NewCallIndex(env.JS, env.KV)
	bustest.FollowCalls(t, x)
	store := &countingStore{KVStore: bus.NewKVStore(env.JS, env.KV).WithIndex(x)}
	m := machine.New(store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	other := machine.New(bus.NewKVStore(env.JS, env.KV))
	current := func() {
		ok, err := x.Current(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}

	e, err := m.Submit(ctx, call("indexed", "new"))
	require.NoError(t, err)
	assert.Zero(t, store.gets.Load(), "a pendingId the index does not hold is written at once")
	current()
	again, err := m.Submit(ctx, call("indexed", "new"))
	require.NoError(t, err)
	assert.Equal(t, e.RequestedAt, again.RequestedAt, "a retry is the call")
	assert.Equal(t, int64(1), store.gets.Load(), "the index holds it: read, not evaluated again")

	before := store.gets.Load()
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Equal(t, before, store.gets.Load(), "decided from the index's revision, no read")

	// The index a revision behind: the decision is asked of the entry
	// as it is now.
	stale, err := m.Submit(ctx, call("indexed", "cancelled"))
	require.NoError(t, err)
	current()
	frozen := &frozenIndex{countingStore: store}
	frozen.e, frozen.rev, _ = store.Latest(stale.PendingID)
	require.NotNil(t, frozen.e)
	_, err = other.Cancel(ctx, stale.PendingID, "system", "stopped")
	require.NoError(t, err)
	_, err = machine.New(frozen).Decide(ctx, stale.PendingID, machine.Decision{Approve: true, By: "alice"})
	var te *machine.TransitionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, machine.StateCancelled, te.Entry.Status)

	// A retry the index does not hold yet: the create is refused and the
	// call read.
	lagging := machine.New(neverHeldOf{store}, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	racing, err := other.Submit(ctx, call("indexed", "raced"))
	require.NoError(t, err)
	got, err = lagging.Submit(ctx, call("indexed", "raced"))
	require.NoError(t, err)
	assert.Equal(t, racing.RequestedAt, got.RequestedAt)
}

// frozenIndex hands out one remembered revision of an entry, whatever
// the bucket holds since.
type frozenIndex struct {
	*countingStore
	e   *machine.Entry
	rev uint64
}

func (f *frozenIndex) Latest(id string) (*machine.Entry, uint64, bool) {
	if f.e == nil || f.e.PendingID != id {
		return nil, 0, false
	}
	e := *f.e
	return &e, f.rev, true
}

// neverHeldOf is a store whose index is behind every write.
type neverHeldOf struct{ *countingStore }

func (neverHeldOf) Absent(string) bool { return true }

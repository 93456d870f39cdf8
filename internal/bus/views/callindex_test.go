package views_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// current waits until x holds what the bucket holds.
func current(t *testing.T, x *views.CallIndex) {
	t.Helper()
	ok, err := x.Current(t.Context())
	require.NoError(t, err)
	require.True(t, ok, "the index catches up")
}

// ids returns the ids of the page f selects.
func ids(t *testing.T, x *views.CallIndex, f views.CallFilter) []string {
	t.Helper()
	page, ok := x.Page(f, 1000)
	require.True(t, ok)
	var got []string
	for _, c := range page {
		got = append(got, c.PendingID)
	}
	return got
}

func indexEntry(call string, at int64, status machine.State) *machine.Entry {
	return &machine.Entry{PendingID: machine.PendingID("idx", call), ConversationID: "idx", ToolName: "deploy", CallerBotID: "bot",
		RequestedAt: at, Status: status}
}

// TestCallIndex_FollowsPutsDeletesAndPurges: the index holds every call
// of the bucket in list order, the entry of open ones only, follows their
// changes, and forgets a call deleted or purged (retired), at once for a
// caller that waits until it is current.
func TestCallIndex_FollowsPutsDeletesAndPurges(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	for i, c := range []string{"c", "a", "b"} {
		_, err := env.Store.Create(ctx, indexEntry(c, int64(10-i%2), machine.StatePendingApproval))
		require.NoError(t, err)
	}
	x := views.NewCallIndex(env.JS, env.KV)
	bustest.FollowCalls(t, x)
	a, b, c := machine.PendingID("idx", "a"), machine.PendingID("idx", "b"), machine.PendingID("idx", "c")
	assert.Equal(t, []string{a, b, c}, ids(t, x, views.CallFilter{}), "oldest first, then by id")
	assert.Equal(t, []string{c}, ids(t, x, views.CallFilter{After: true, AfterAt: 10, AfterID: b}))

	e, rev, err := env.Store.Get(ctx, a)
	require.NoError(t, err)
	e.Status = machine.StateRejectedByUser
	_, err = env.Store.Update(ctx, e, rev)
	require.NoError(t, err)
	_, err = env.Store.Create(ctx, indexEntry("d", 5, machine.StateScheduled))
	require.NoError(t, err)
	current(t, x)
	d := machine.PendingID("idx", "d")
	assert.Equal(t, []string{a}, ids(t, x, views.CallFilter{Status: machine.StateRejectedByUser, ToolName: "deploy", CallerBotID: "bot"}))
	assert.Empty(t, ids(t, x, views.CallFilter{Status: machine.StateRejectedByUser, CallerBotID: "other"}))
	assert.Equal(t, []string{b, c}, ids(t, x, views.CallFilter{Status: machine.StatePendingApproval}))
	page, _ := x.Page(views.CallFilter{}, 10)
	require.Len(t, page, 4)
	assert.Equal(t, d, page[0].PendingID)
	assert.NotNil(t, page[0].Entry, "an open call's entry is in memory")
	assert.Nil(t, page[1].Entry, "a finished one's is not")

	require.NoError(t, env.KV.Purge(ctx, a))
	require.NoError(t, env.KV.Delete(ctx, b))
	current(t, x)
	assert.Equal(t, []string{d, c}, ids(t, x, views.CallFilter{}), "a call purged or deleted leaves the index")
	n, _ := x.Len()
	assert.Equal(t, 2, n)
}

// TestCallIndex_CurrentPastAMessageGone: when the bucket's last message
// is gone from its stream (a retired call's purge marker, expired), an
// index that never saw it is current all the same, without waiting it
// out.
func TestCallIndex_CurrentPastAMessageGone(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	_, err := env.Store.Create(ctx, indexEntry("kept", 1, machine.StatePendingApproval))
	require.NoError(t, err)
	rev, err := env.Store.Create(ctx, indexEntry("gone", 2, machine.StateCompletedSuccess))
	require.NoError(t, err)
	require.NoError(t, env.Store.Retire(ctx, machine.PendingID("idx", "gone"), rev, time.Second))
	stream, err := env.JS.Stream(ctx, "KV_"+wire.CallsBucket)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	marker := info.State.LastSeq
	bustest.Eventually(t, 10*time.Second, 50*time.Millisecond, "the purge marker expired", func() (bool, any) {
		_, err := stream.GetMsg(ctx, marker)
		return errors.Is(err, jetstream.ErrMsgNotFound), fmt.Sprintf("reading it: %v", err)
	})

	x := views.NewCallIndex(env.JS, env.KV)
	bustest.FollowCalls(t, x)
	ok, err := x.Current(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "nothing is left to deliver")
	assert.Equal(t, []string{machine.PendingID("idx", "kept")}, ids(t, x, views.CallFilter{}))
}

// TestCallIndex_NotSyncedSaysSo: an index that does not follow the bucket
// answers nothing, so that its callers read the bucket.
func TestCallIndex_NotSyncedSaysSo(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	x := views.NewCallIndex(env.JS, env.KV)
	_, ok := x.Page(views.CallFilter{}, 10)
	assert.False(t, ok)
	ok, err := x.Current(t.Context())
	require.NoError(t, err)
	assert.False(t, ok)
}

// TestKVStore_WithIndexStartsFromTheIndex: a store given the index knows
// a pendingId it never wrote is free once the index is synced, and hands
// a command the open entry the index holds at its revision (as stored,
// receipts and all), and nothing of a finished one.
func TestKVStore_WithIndexStartsFromTheIndex(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	x := views.NewCallIndex(env.JS, env.KV)
	store := bus.NewKVStore(env.JS, env.KV).WithIndex(x)
	open := indexEntry("open", 1, machine.StatePendingApproval)
	open.ToolArguments = json.RawMessage(`{"to":"prod"}`)
	open.Receipts = []machine.Receipt{{Seq: 1, Event: machine.EventAsk}}
	assert.False(t, store.Absent(open.PendingID), "not synced: it cannot tell")

	rev, err := env.Store.Create(ctx, open) // written by another process
	require.NoError(t, err)
	_, err = env.Store.Create(ctx, indexEntry("done", 2, machine.StateCompletedSuccess))
	require.NoError(t, err)
	bustest.FollowCalls(t, x)
	current(t, x)

	assert.True(t, store.Absent(machine.PendingID("idx", "new")))
	assert.False(t, store.Absent(open.PendingID))
	assert.False(t, store.Absent(machine.PendingID("idx", "done")))
	got, gotRev, ok := store.Latest(open.PendingID)
	require.True(t, ok)
	assert.Equal(t, rev, gotRev)
	assert.Equal(t, open, got)
	_, _, ok = store.Latest(machine.PendingID("idx", "done"))
	assert.False(t, ok, "a finished call is read from the bucket")

	// A later revision, once the index has it, is the one handed out.
	open.Status = machine.StateApproved
	rev, err = env.Store.Update(ctx, open, rev)
	require.NoError(t, err)
	current(t, x)
	got, gotRev, ok = store.Latest(open.PendingID)
	require.True(t, ok)
	assert.Equal(t, rev, gotRev)
	assert.Equal(t, machine.StateApproved, got.Status)
}

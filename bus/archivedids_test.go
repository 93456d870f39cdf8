package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestArchivedIDs_SaysWhichCallsTheArchiveMayHold: until it has read the
// archive's ids, every call may be there; then only those archived, those
// archived since, and those the bucket's watch showed purged before the
// archive showed them.
func TestArchivedIDs_SaysWhichCallsTheArchiveMayHold(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	archive := bus.NewArchive(env.JS, env.Buckets.Archive)
	put := func(id string) {
		t.Helper()
		require.NoError(t, archive.Put(ctx, wire.ArchivedCall{Entry: &machine.Entry{PendingID: id, Status: machine.StateCompletedSuccess}, Revision: 1}))
	}
	put("conv.before")

	ids := bus.NewArchivedIDs(env.JS)
	assert.True(t, ids.MayHold("conv.new"), "anything, before the archive is read")
	apply, loaded := ids.View().Start()
	loaded()
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ids.Follow(fctx, bustest.Logger()) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	bustest.Eventually(t, 30*time.Second, 5*time.Millisecond, "the archive's ids read", func() (bool, any) {
		return !ids.MayHold("conv.new"), "conv.new may be archived"
	})
	assert.True(t, ids.MayHold("conv.before"), "archived before the follow began")

	put("conv.after")
	bustest.Eventually(t, 30*time.Second, 5*time.Millisecond, "a call archived since", func() (bool, any) {
		return ids.MayHold("conv.after"), "conv.after not known archived"
	})

	// The bucket's watch shows a call purged (retired) before the follow
	// shows it archived: it may be held meanwhile.
	apply(bus.CallRevision{Key: "conv.retired", Revision: 9, Op: jetstream.KeyValuePurge})
	assert.True(t, ids.MayHold("conv.retired"), "purged from the bucket, not yet seen archived")
	apply(bus.CallRevision{Key: "conv.open", Revision: 10, Op: jetstream.KeyValuePut})
	assert.False(t, ids.MayHold("conv.open"), "a put says nothing of the archive")
}

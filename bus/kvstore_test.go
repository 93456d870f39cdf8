package bus_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

func entry(conv, call string) *machine.Entry {
	return &machine.Entry{
		PendingID: machine.PendingID(conv, call), ToolCallID: call, ToolName: "web_search",
		ToolArguments: json.RawMessage(`{"query":"q"}`), CallerBotID: "bot", ConversationID: conv,
		Status: machine.StatePendingApproval,
	}
}

func TestKVStore_CreateGetUpdate(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := env.Store

	e := entry("c", "1")
	rev, err := s.Create(ctx, e)
	require.NoError(t, err)
	_, err = s.Create(ctx, entry("c", "1"))
	assert.ErrorIs(t, err, machine.ErrExists)

	got, gotRev, err := s.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, rev, gotRev)
	assert.Equal(t, e, got)

	got.Status = machine.StateApproved
	rev2, err := s.Update(ctx, got, rev)
	require.NoError(t, err)
	assert.Greater(t, rev2, rev)

	stale := *got
	stale.Status = machine.StateRejectedByUser
	_, err = s.Update(ctx, &stale, rev)
	assert.ErrorIs(t, err, machine.ErrConflict, "a write at an old revision loses")
	got, _, err = s.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status, "the losing write changed nothing")

	_, _, err = s.Get(ctx, machine.PendingID("c", "missing"))
	assert.ErrorIs(t, err, machine.ErrNotFound)
	for _, bad := range []string{"", "no-dot", "a.>", "a.*", "a b.c"} {
		_, _, err = s.Get(ctx, bad)
		assert.ErrorIs(t, err, machine.ErrNotFound, bad)
	}
}

func TestKVStore_ListConversationReadsOnlyItsKeys(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	for c := range 20 {
		for i := range 5 {
			_, err := env.Store.Create(ctx, entry(fmt.Sprintf("conv-%d", c), fmt.Sprintf("call-%d", i)))
			require.NoError(t, err)
		}
	}
	// A conversation whose id is a prefix of another's must not see it.
	_, err := env.Store.Create(ctx, entry("conv-1 x", "call-0"))
	require.NoError(t, err)

	got, err := env.Store.ListConversation(ctx, "conv-1")
	require.NoError(t, err)
	require.Len(t, got, 5)
	for _, e := range got {
		assert.Equal(t, "conv-1", e.ConversationID)
	}
	got, err = env.Store.ListConversation(ctx, "conv-1 x")
	require.NoError(t, err)
	require.Len(t, got, 1)
	got, err = env.Store.ListConversation(ctx, "nobody")
	require.NoError(t, err)
	assert.Empty(t, got)
}

// TestProvision_EntriesAreReadFromTheLeader: a direct get may be answered
// by a replica that has not seen the last write (seen under load: 4 stale
// reads in 300 on 3 replicas), which would validate a command against an
// old state. The entries' stream must serve no direct gets, also after
// provisioning again (CreateOrUpdateKeyValue turns them back on).
func TestProvision_EntriesAreReadFromTheLeader(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[1])
	ctx := t.Context()
	for range 2 {
		_, err := bus.Provision(ctx, env.JS, bus.Topology{Replicas: 3})
		require.NoError(t, err)
		st, err := env.JS.Stream(ctx, "KV_"+wire.CallsBucket)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		assert.False(t, info.Config.AllowDirect)
		assert.Equal(t, 3, info.Config.Replicas)
	}
}

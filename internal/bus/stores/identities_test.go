package stores_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/wire"
)

// TestIdentityStore_ARevokeWhoseAnswerWasLostIsAskedAgain: a revocation
// whose answer does not come is sent again. One stored after all is no
// conflict with itself, and is stored once; one that was not, when
// another revoked the credential first, returns the credential as that
// one revoked it.
func TestIdentityStore_ARevokeWhoseAnswerWasLostIsAskedAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	kv := env.Buckets.Identities
	s := stores.NewIdentityStore(env.JS, kv)
	add := func(key string) {
		require.NoError(t, s.Add(ctx, wire.Identity{Name: key, Role: wire.RoleAgent, Key: key, IssuedAt: 1, IssuedBy: "admin"}))
	}

	add("stored")
	lossy := stores.NewIdentityStore(env.JS, &bustest.LostReplies{KeyValue: kv, Stored: true, Lost: 1})
	id, err := lossy.Revoke(ctx, "stored", "alice", 1000)
	require.NoError(t, err, "its own revocation is no conflict")
	assert.Equal(t, "alice", id.RevokedBy)
	hist, err := kv.History(ctx, "stored")
	require.NoError(t, err)
	assert.Len(t, hist, 2, "issued, then revoked once")

	add("other")
	other := func(ctx context.Context) error { _, err := s.Revoke(ctx, "other", "bob", 2000); return err }
	lossy = stores.NewIdentityStore(env.JS, &bustest.LostReplies{KeyValue: kv, Lost: 1, Before: other})
	id, err = lossy.Revoke(ctx, "other", "alice", 3000)
	require.NoError(t, err, "another revoked it first")
	assert.Equal(t, "bob", id.RevokedBy, "revoked once, by whoever came first")
	assert.Equal(t, int64(2000), id.RevokedAt)
}

package stores_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
)

// TestDecisionTokenStore_ARedemptionWhoseAnswerWasLostIsNotAnothers: a
// token is issued and redeemed though the answer to each write is lost
// (stored, and the writer hears only that its deadline passed): both are
// asked again, and the redemption is its writer's, not "used by another
// request". One another redeemed first is ErrTokenUsed.
func TestDecisionTokenStore_ARedemptionWhoseAnswerWasLostIsNotAnothers(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	losing := func() *stores.DecisionTokenStore {
		return stores.NewDecisionTokenStore(env.JS, &bustest.LostReplies{KeyValue: env.Buckets.DecisionTokens, Stored: true, Lost: 1})
	}
	now := time.Now()
	token, err := losing().Issue(ctx, stores.DecisionToken{PendingID: "c.call-1", Approve: true, Approver: "ann", IssuedAt: now.UnixMilli(), ExpiresAt: now.Add(time.Hour).UnixMilli()})
	require.NoError(t, err, "an issue whose answer was lost")
	tokens := losing()
	tok, rev, err := tokens.Get(ctx, token)
	require.NoError(t, err)
	used, err := tokens.Use(ctx, token, tok, rev, now)
	require.NoError(t, err, "a redemption whose answer was lost is its own")
	stored, _, err := tokens.Get(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, used.UseID, stored.UseID)
	assert.NotZero(t, stored.UsedAt)

	_, err = tokens.Use(ctx, token, tok, rev, now)
	assert.ErrorIs(t, err, stores.ErrTokenUsed, "another redemption of the token read before the first")
}

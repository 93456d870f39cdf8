package gate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// tokenGate is a Service over a fresh server that asks about every call
// (deadline in an hour, approvers alice and bob), and a call pending.
func tokenGate(t *testing.T, clock func() time.Time) (*gate.Service, *bustest.Env, *machine.Entry) {
	t.Helper()
	env := bustest.Start(t, bustest.Topologies[0])
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true, Reason: "ask",
			Approvers: []string{"alice", "bob"}}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask, Clock: clock})
	e, err := g.Submit(t.Context(), gate.System, machine.Call{ToolCallID: "t1", ToolName: "deploy", CallerBotID: "bot", ConversationID: "c"})
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)
	return g, env, e
}

// TestDecisionToken_WorksOnceThenRefused: a token decides its call as
// its approver; used again it is refused (409, "already used"), and the
// other token of the same call, for the other decision, is refused by the
// call's state, deciding nothing more.
func TestDecisionToken_WorksOnceThenRefused(t *testing.T) {
	t.Parallel()
	g, env, e := tokenGate(t, nil)
	ctx := t.Context()
	toks, err := g.Links().Issue(ctx, gate.System, e.PendingID, "alice")
	require.NoError(t, err)
	assert.Equal(t, e.ApprovalTimeoutAt, toks.ExpiresAt.UnixMilli(), "good until the call's deadline")
	assert.NotEqual(t, toks.Approve, toks.Reject)

	// Stored hashed: the bucket holds neither token.
	keys, err := env.Buckets.DecisionTokens.ListKeys(ctx)
	require.NoError(t, err)
	var stored []string
	for k := range keys.Keys() {
		stored = append(stored, k)
	}
	require.Len(t, stored, 2)
	for _, k := range stored {
		assert.NotContains(t, []string{toks.Approve, toks.Reject}, k)
		v, err := env.Buckets.DecisionTokens.Get(ctx, k)
		require.NoError(t, err)
		assert.NotContains(t, string(v.Value()), toks.Approve)
		assert.NotContains(t, string(v.Value()), toks.Reject)
	}

	view, err := g.Links().View(ctx, toks.Approve)
	require.NoError(t, err)
	assert.True(t, view.Approve)
	assert.Equal(t, "alice", view.Approver)
	assert.False(t, view.Used)
	assert.Equal(t, machine.StatePendingApproval, view.Entry.Status, "looking decides nothing")

	got, err := g.Links().Redeem(ctx, toks.Approve)
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Equal(t, "alice", got.ApprovedOrRejectedByUserID, "decided as the token's approver")

	_, err = g.Links().Redeem(ctx, toks.Approve)
	require.ErrorIs(t, err, stores.ErrTokenUsed)
	status, code := wire.ErrorStatus(err)
	assert.Equal(t, 409, status)
	assert.Equal(t, "conflict", code)
	assert.Contains(t, err.Error(), "already used")

	_, err = g.Links().Redeem(ctx, toks.Reject)
	require.ErrorIs(t, err, machine.ErrConflict, "the call is decided")
	cur, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, cur.Status)
	view, err = g.Links().View(ctx, toks.Approve)
	require.NoError(t, err)
	assert.True(t, view.Used)
}

// TestDecisionToken_RefusedAfterTheDeadline: a token redeemed past its
// call's approval deadline decides nothing (409 expired); the call is
// rejected by timeout, as any late decision leaves it.
func TestDecisionToken_RefusedAfterTheDeadline(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	skew := time.Duration(0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(skew) }
	g, _, e := tokenGate(t, clock)
	ctx := t.Context()
	toks, err := g.Links().Issue(ctx, gate.System, e.PendingID, "alice")
	require.NoError(t, err)
	mu.Lock()
	skew = 2 * time.Hour
	mu.Unlock()
	_, err = g.Links().Redeem(ctx, toks.Approve)
	require.ErrorIs(t, err, machine.ErrExpired)
	status, code := wire.ErrorStatus(err)
	assert.Equal(t, 409, status)
	assert.Equal(t, "expired", code)
	cur, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Empty(t, cur.ApprovedOrRejectedByUserID, "nobody decided")
}

// TestDecisionToken_RacingRedemptionsDecideOnce: many requests redeem the
// same token at once, on Services of their own: one decides, every other
// is told the token was used.
func TestDecisionToken_RacingRedemptionsDecideOnce(t *testing.T) {
	t.Parallel()
	g, env, e := tokenGate(t, nil)
	ctx := t.Context()
	toks, err := g.Links().Issue(ctx, gate.System, e.PendingID, "bob")
	require.NoError(t, err)
	const racers = 16
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		other := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets})
		wg.Go(func() {
			<-start
			_, errs[i] = other.Links().Redeem(ctx, toks.Reject)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		if err == nil {
			won++
			continue
		}
		assert.ErrorIs(t, err, stores.ErrTokenUsed, "racer %d", i)
	}
	assert.Equal(t, 1, won, "exactly one redemption decides: %v", errs)
	cur, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, cur.Status)
	assert.Equal(t, "bob", cur.ApprovedOrRejectedByUserID)
}

// TestDecisionToken_ForgedRefused: a token never issued (of the right
// shape or not) decides nothing and is not found; nobody but toolgate
// itself issues tokens, and not without an approver.
func TestDecisionToken_ForgedRefused(t *testing.T) {
	t.Parallel()
	g, _, e := tokenGate(t, nil)
	ctx := t.Context()
	toks, err := g.Links().Issue(ctx, gate.System, e.PendingID, "alice")
	require.NoError(t, err)
	forged := []string{"", "x", strings.Repeat("A", len(toks.Approve)), toks.Approve[:len(toks.Approve)-1] + "Z", toks.Approve + "A", "../" + toks.Approve}
	for _, f := range forged {
		if f == toks.Approve {
			continue
		}
		_, err := g.Links().Redeem(ctx, f)
		assert.ErrorIs(t, err, machine.ErrNotFound, "%q", f)
		_, err = g.Links().View(ctx, f)
		assert.ErrorIs(t, err, machine.ErrNotFound, "%q", f)
	}
	cur, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, cur.Status)

	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleAdmin}}
	_, err = g.Links().Issue(ctx, alice, e.PendingID, "alice")
	assert.ErrorIs(t, err, machine.ErrForbidden, "an admin's request is not toolgate's notifier")
	_, err = g.Links().Issue(ctx, gate.System, e.PendingID, "")
	assert.ErrorIs(t, err, machine.ErrInvalid)

	// An approver the call's policy does not name: the token decides nothing.
	toks, err = g.Links().Issue(ctx, gate.System, e.PendingID, "mallory")
	require.NoError(t, err)
	_, err = g.Links().Redeem(ctx, toks.Approve)
	assert.ErrorIs(t, err, machine.ErrForbidden)
	cur, err = g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, cur.Status)
}

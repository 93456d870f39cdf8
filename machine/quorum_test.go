package machine_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

var twoOfThree = machine.Verdict{Action: machine.ActionAsk, Reason: "quorum", ApprovalTimeout: time.Hour,
	Quorum: &machine.Quorum{Required: 2, Of: []string{"alice", "bob", "carol"}}}

// Three approvers race on each of many calls under a 2-of-3 quorum: on
// every call exactly one write approves it, right after the second
// distinct yes, and the third approver is told it is approved already.
func TestQuorum_ThreeApproversRacingApproveOnceAtTheSecondYes(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			env := bustest.Start(t, topo)
			ctx := t.Context()
			m := machine.New(env.Store, verdict(twoOfThree))
			const calls = 40
			var refused atomic.Int64
			g, gctx := errgroup.WithContext(ctx)
			for i := range calls {
				e, err := m.Submit(ctx, call("quorum-race", fmt.Sprintf("c%d", i)))
				require.NoError(t, err)
				for _, who := range []string{"alice", "bob", "carol"} {
					g.Go(func() error {
						_, err := m.Decide(gctx, e.PendingID, machine.Decision{Approve: true, By: who})
						var te *machine.TransitionError
						switch {
						case err == nil:
						case assert.ErrorAs(t, err, &te) && te.Entry.Status == machine.StateApproved:
							refused.Add(1)
						default:
							return fmt.Errorf("%s on %s: %w", who, e.PendingID, err)
						}
						return nil
					})
				}
			}
			require.NoError(t, g.Wait())
			assert.EqualValues(t, calls, refused.Load(), "one approver of three is refused on every call")
			for i := range calls {
				id := machine.PendingID("quorum-race", fmt.Sprintf("c%d", i))
				got, _, err := env.Store.Get(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, machine.StateApproved, got.Status, id)
				require.Len(t, got.Votes, 2, id)
				assert.NotEqual(t, got.Votes[0].By, got.Votes[1].By, "two distinct approvers")
				assert.Equal(t, got.Votes[1].By, got.ApprovedOrRejectedByUserID, "the second yes approves")
				history, err := env.Store.History(ctx, id)
				require.NoError(t, err)
				var writes []machine.Event
				for _, h := range history {
					writes = append(writes, h.Event)
				}
				assert.Equal(t, []machine.Event{machine.EventAsk, machine.EventVote, machine.EventApprove}, writes, id)
			}
		})
	}
}

func TestQuorum_AnApproverCountsOnce(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(twoOfThree))
	e, err := m.Submit(ctx, call("quorum-once", "c1"))
	require.NoError(t, err)

	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Reason: "looks right"})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status)
	assert.Equal(t, machine.EventVote, got.LastTransition.Event)
	assert.Equal(t, "approved by alice: 1 of 2 approvals; still needed: one of bob, carol (looks right)", got.LastTransition.Reason)
	assert.Empty(t, got.ApprovedOrRejectedByUserID, "nobody has decided the call yet")

	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.ErrorIs(t, err, machine.ErrConflict)
	assert.Contains(t, err.Error(), "alice approved this call already")
	stored, _, err := env.Store.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, 1, stored.Approvals(), "the same approver twice counts once")
	assert.Equal(t, "1 of 2 approvals; still needed: one of bob, carol", stored.Needed())

	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "dave"})
	assert.ErrorIs(t, err, machine.ErrForbidden, "only the quorum's members decide")
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob", Scope: machine.ScopeSession})
	assert.ErrorIs(t, err, machine.ErrInvalid, "no grant from a call under a quorum")
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob", Arguments: json.RawMessage(`{"query":"other"}`)})
	assert.ErrorIs(t, err, machine.ErrEditDenied, "its approvers approve the same arguments")

	got, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Equal(t, "2 of 2 approvals", got.Needed())
}

func TestQuorum_Rejection(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()

	t.Run("any", func(t *testing.T) {
		m := machine.New(env.Store, verdict(twoOfThree))
		e, err := m.Submit(ctx, call("quorum-reject", "any"))
		require.NoError(t, err)
		_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
		require.NoError(t, err)
		got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "alice", Reason: "on second thought, no"})
		require.NoError(t, err, "one rejection ends the call, even from one who approved")
		assert.Equal(t, machine.StateRejectedByUser, got.Status)
	})
	t.Run("majority", func(t *testing.T) {
		v := twoOfThree
		v.Quorum = &machine.Quorum{Required: 2, Of: []string{"alice", "bob", "carol"}, RejectWhen: machine.RejectMajority}
		m := machine.New(env.Store, verdict(v))
		e, err := m.Submit(ctx, call("quorum-reject", "majority"))
		require.NoError(t, err)
		got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "alice"})
		require.NoError(t, err)
		assert.Equal(t, machine.StatePendingApproval, got.Status, "one no of three is no majority")
		assert.Equal(t, machine.EventVote, got.LastTransition.Event)
		_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "alice"})
		assert.ErrorIs(t, err, machine.ErrConflict, "a no counts once too")
		got, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "bob"})
		require.NoError(t, err)
		assert.Equal(t, machine.StateRejectedByUser, got.Status, "two of three")
	})
}

// An escalation tier due lets its people decide; one not due is refused.
func TestEscalate_WidensWhoMayDecide(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	v := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Approvers: []string{"alice"},
		Escalate: []machine.EscalationTier{{After: 0, To: []string{"oncall"}}, {After: time.Hour, To: []string{"cto"}}}}
	m := machine.New(env.Store, verdict(v))
	e, err := m.Submit(ctx, call("escalate", "c1"))
	require.NoError(t, err)
	require.Len(t, e.Escalations, 2)

	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "oncall"})
	require.ErrorIs(t, err, machine.ErrForbidden, "not before the tier is reached")

	got, err := m.Escalate(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status)
	assert.Equal(t, 1, got.Escalated)
	assert.Equal(t, []string{"alice", "oncall"}, got.Deciders())
	assert.Equal(t, "nobody decided in time: escalated (tier 1 of 2) to oncall", got.LastTransition.Reason)

	_, err = m.Escalate(ctx, e.PendingID)
	require.ErrorIs(t, err, machine.ErrConflict, "the next tier is an hour away")

	got, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "oncall"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
	_, err = m.Escalate(ctx, e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict, "a decided call escalates no further")
}

package machine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// TestReviewer_NarrowsOnly: a reviewer's approval and rejection are its
// own decisions (decidedBy reviewer, the actor reviewer:<name>, signed in
// the receipt); it may reject a call under a quorum outright, but not
// approve one, nor a high-risk call, nor grant, edit, answer with a
// result or stop the agent's turn; and a review that
// leaves a call to humans is recorded on it and changes nothing else.
func TestReviewer_NarrowsOnly(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	submitted := func(v machine.Verdict, id string) *machine.Entry {
		t.Helper()
		e, err := machine.New(env.Store, machine.WithSigner(s), verdict(v)).Submit(ctx, call("reviewed", id))
		require.NoError(t, err)
		return e
	}
	m := machine.New(env.Store, machine.WithSigner(s))
	ask := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Approvers: []string{"alice"}}
	bot := machine.Decision{Approve: true, By: "reviewer:bot", DecidedBy: machine.DecidedByReviewer, Reason: "git status only reads"}

	approved, err := m.Decide(ctx, submitted(ask, "ok").PendingID, bot)
	require.NoError(t, err, "a reviewer decides though the call names its approvers")
	assert.Equal(t, machine.StateApproved, approved.Status)
	assert.Equal(t, machine.DecidedByReviewer, approved.DecidedBy)
	assert.Equal(t, "reviewer:bot", approved.ApprovedOrRejectedByUserID)
	assert.Equal(t, machine.DecidedByReviewer, approved.Receipts[len(approved.Receipts)-1].DecidedBy)

	quorum := ask
	quorum.Quorum = &machine.Quorum{Required: 2}
	_, err = m.Decide(ctx, submitted(quorum, "quorum").PendingID, bot)
	assert.ErrorIs(t, err, machine.ErrForbidden, "a quorum reserves the call for humans")
	reject := bot
	reject.Approve = false
	rejected, err := m.Decide(ctx, submitted(quorum, "quorum-rejected").PendingID, reject)
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, rejected.Status, "a reviewer's rejection is no vote: it rejects")
	assert.Equal(t, machine.DecidedByReviewer, rejected.DecidedBy)

	high := ask
	high.Risk = machine.RiskHigh
	_, err = m.Decide(ctx, submitted(high, "high").PendingID, bot)
	assert.ErrorIs(t, err, machine.ErrForbidden, "a high risk reserves the call for humans")
	grant := bot
	grant.Scope = machine.ScopeSession
	_, err = m.Decide(ctx, submitted(ask, "grant").PendingID, grant)
	assert.ErrorIs(t, err, machine.ErrForbidden, "a reviewer grants nothing")
	answer := reject // a result answers the call: no approval
	answer.Result = json.RawMessage(`"clean"`)
	_, err = m.Decide(ctx, submitted(ask, "respond").PendingID, answer)
	assert.Error(t, err, "a reviewer answers no call with a result")
	stop := reject
	stop.Interrupt = true
	_, err = m.Decide(ctx, submitted(ask, "interrupt").PendingID, stop)
	assert.Error(t, err, "a reviewer stops no agent's turn")
	_, err = m.Decide(ctx, submitted(ask, "posing").PendingID, machine.Decision{Approve: true, By: "alice", DecidedBy: machine.DecidedByReviewer})
	assert.ErrorIs(t, err, machine.ErrInvalid, "a reviewer acts as reviewer:<name>")

	pending := submitted(ask, "escalated")
	reviewed, err := m.Review(ctx, pending.PendingID, machine.Review{By: "reviewer:bot", Answer: machine.ReviewEscalate, Lean: machine.ReviewReject, Reason: "touches .env"})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, reviewed.Status)
	assert.Equal(t, machine.EventReview, reviewed.LastTransition.Event)
	assert.Equal(t, "reviewer:bot", reviewed.LastTransition.Actor)
	assert.Empty(t, reviewed.LastTransition.DecidedBy, "a review decides nothing")
	require.Len(t, reviewed.Reviews, 1)
	assert.Equal(t, machine.ReviewReject, reviewed.Reviews[0].Lean)
	assert.Equal(t, pending.DecidedBy, reviewed.DecidedBy, "the policy's ask is still the call's latest decision")
	human, err := m.Decide(ctx, pending.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err, "the call is the humans' still")
	assert.Len(t, human.Reviews, 1)
	_, err = m.Review(ctx, human.PendingID, machine.Review{By: "reviewer:bot", Answer: machine.ReviewEscalate})
	assert.Error(t, err, "only a pending call is reviewed")
	_, err = m.Review(ctx, submitted(ask, "bad").PendingID, machine.Review{By: "reviewer:bot", Answer: "maybe"})
	assert.ErrorIs(t, err, machine.ErrInvalid)
}

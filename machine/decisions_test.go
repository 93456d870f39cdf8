package machine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// dryPolicy is an Evaluator that is also an EditChecker: it answers v,
// and dry the verdict dry returns, as the policy in force at a timeout.
type dryPolicy struct {
	v   machine.Verdict
	dry func(c machine.Call) machine.Verdict
}

func (p dryPolicy) Evaluate(context.Context, machine.Call) (machine.Verdict, error) { return p.v, nil }
func (p dryPolicy) EvaluateDry(_ context.Context, c machine.Call) (machine.Verdict, error) {
	return p.dry(c), nil
}
func (p dryPolicy) CheckEdit(ctx context.Context, c machine.Call) (machine.Verdict, error) {
	return p.EvaluateDry(ctx, c)
}

func TestRespond_EndsThePendingCallWithTheApproversResult(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := newTestSigner(t)
	ctx := t.Context()
	ask := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true, Respondable: true}
	m := machine.New(env.Store, machine.WithSigner(s), verdict(ask))
	e, err := m.Submit(ctx, call("respond", "c1"))
	require.NoError(t, err)
	assert.True(t, e.Respondable)

	for name, d := range map[string]machine.Decision{
		"an approval":      {Approve: true, By: "alice", Result: json.RawMessage(`1`)},
		"an interrupt":     {By: "alice", Result: json.RawMessage(`1`), Interrupt: true},
		"a scope":          {By: "alice", Result: json.RawMessage(`1`), Scope: machine.ScopeSession},
		"not JSON":         {By: "alice", Result: json.RawMessage(`{nope`)},
		"too long":         {By: "alice", Result: json.RawMessage(`"` + strings.Repeat("x", machine.MaxResponse) + `"`)},
		"a classifier's":   {By: "alice", Result: json.RawMessage(`1`), DecidedBy: machine.DecidedByClassifier},
		"the agent's self": {By: "bot-1", Result: json.RawMessage(`1`)},
	} {
		_, err := m.Decide(ctx, e.PendingID, d)
		assert.Error(t, err, name)
	}
	got, err := m.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "refused answers change nothing")

	got, err = m.Decide(ctx, e.PendingID, machine.Decision{By: "alice", Reason: "cached answer", Result: json.RawMessage(`{"hits":3}`)})
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.JSONEq(t, `{"hits":3}`, string(got.Result))
	assert.Equal(t, "alice", got.RespondedBy)
	assert.Equal(t, "alice", got.ApprovedOrRejectedByUserID)
	assert.Equal(t, machine.DecidedByHuman, got.DecidedBy)
	assert.Equal(t, 0, got.ExecutionAttempts, "no executor ran it")
	assert.Equal(t, machine.EventRespond, got.LastTransition.Event)
	last := got.Receipts[len(got.Receipts)-1]
	assert.Equal(t, machine.EventRespond, last.Event)
	assert.Equal(t, "alice", last.Actor)
	assert.Equal(t, machine.OutcomeDigest(got.Result, "", 0), last.ResultDigest, "the receipt binds the supplied result")
	check := machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}}
	_, err = machine.VerifyReceipts(got, check)
	require.NoError(t, err)
	forged := clone(t, got)
	forged.Result = json.RawMessage(`{"hits":4}`)
	_, err = machine.VerifyReceipts(forged, check)
	assert.Error(t, err, "a result changed after the response does not verify")

	// A call whose policy does not list it respondable is refused, and
	// stays pending.
	plain := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	e2, err := plain.Submit(ctx, call("respond", "c2"))
	require.NoError(t, err)
	_, err = plain.Decide(ctx, e2.PendingID, machine.Decision{By: "alice", Result: json.RawMessage(`1`)})
	require.ErrorIs(t, err, machine.ErrForbidden)
	assert.Contains(t, err.Error(), "not respondable")
	// Nor is a call under a quorum answered by one approver.
	quorum := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, Respondable: true, Quorum: &machine.Quorum{Required: 2}}))
	e3, err := quorum.Submit(ctx, call("respond", "c3"))
	require.NoError(t, err)
	_, err = quorum.Decide(ctx, e3.PendingID, machine.Decision{By: "alice", Result: json.RawMessage(`1`)})
	require.ErrorIs(t, err, machine.ErrForbidden)
	assert.Contains(t, err.Error(), "quorum")
}

func TestReject_Interrupt(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	e, err := m.Submit(ctx, call("interrupt", "c1"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Interrupt: true})
	require.ErrorIs(t, err, machine.ErrInvalid, "only a rejection interrupts")
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{By: "alice", Reason: "stop and ask me", Interrupt: true})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, got.Status)
	assert.True(t, got.Interrupt)
	assert.True(t, got.LastTransition.Interrupt)

	e2, err := m.Submit(ctx, call("interrupt", "c2"))
	require.NoError(t, err)
	got, err = m.Decide(ctx, e2.PendingID, machine.Decision{By: "alice"})
	require.NoError(t, err)
	assert.False(t, got.Interrupt, "a plain rejection does not")
}

func TestExpire_OnTimeoutOutcomes(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := newTestSigner(t)
	ctx := t.Context()
	now := time.Now()
	later := func() time.Time { return now.Add(2 * time.Hour) }
	check := machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}}
	ask := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}
	asked := func(o machine.TimeoutOutcome, risk machine.Risk) machine.Verdict {
		v := ask
		v.OnTimeout, v.Risk = o, risk
		return v
	}
	// The policy in force at the deadline says what it said at submit,
	// except that it denies calls to conversation "now-denied".
	inForce := func(v machine.Verdict) machine.Option {
		return machine.WithEvaluator(dryPolicy{v: v, dry: func(c machine.Call) machine.Verdict {
			if c.ConversationID == "now-denied" {
				return machine.Verdict{Action: machine.ActionDeny, Reason: `rules.deny "web_search" (default)`}
			}
			return v
		}})
	}

	cases := []struct {
		conv    string
		v       machine.Verdict
		want    machine.State
		event   machine.Event
		because string
	}{
		{"reject", asked(machine.TimeoutReject, ""), machine.StateRejectedByTimeout, machine.EventTimeout, "approval timed out"},
		{"cancel", asked(machine.TimeoutCancel, ""), machine.StateCancelled, machine.EventCancel, "cancelled (onTimeout cancel)"},
		{"approve", asked(machine.TimeoutApprove, machine.RiskLow), machine.StateApproved, machine.EventApprove, "approved (onTimeout approve)"},
		{"approve-high", asked(machine.TimeoutApprove, machine.RiskHigh), machine.StateRejectedByTimeout, machine.EventTimeout, "not approved as onTimeout says, because the call's risk is high"},
		{"now-denied", asked(machine.TimeoutApprove, ""), machine.StateRejectedByTimeout, machine.EventTimeout, "because the policy denies the call now"},
	}
	for _, c := range cases {
		submit := machine.New(env.Store, machine.WithSigner(s), inForce(c.v), machine.WithClock(func() time.Time { return now }))
		e, err := submit.Submit(ctx, call(c.conv, "c1"))
		require.NoError(t, err)
		timer := machine.New(env.Store, machine.WithSigner(s), inForce(c.v), machine.WithClock(later))
		// Past the deadline, a human's decision is refused: the timer's
		// outcome has the call.
		_, err = timer.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
		require.ErrorIs(t, err, machine.ErrExpired, c.conv)
		got, err := timer.Expire(ctx, e.PendingID)
		require.NoError(t, err, c.conv)
		assert.Equal(t, c.want, got.Status, c.conv)
		assert.Equal(t, c.event, got.LastTransition.Event, c.conv)
		assert.Equal(t, "timer", got.LastTransition.Actor, c.conv)
		assert.Equal(t, machine.DecidedByTimeout, got.DecidedBy, c.conv)
		assert.Contains(t, got.StatusReason, c.because, c.conv)
		assert.Equal(t, got.LastTransition.At, got.DecisionTime, c.conv)
		assert.Empty(t, got.ApprovedOrRejectedByUserID, c.conv)
		_, err = machine.VerifyReceipts(got, check)
		assert.NoError(t, err, c.conv)
		_, err = timer.Expire(ctx, e.PendingID)
		assert.ErrorIs(t, err, machine.ErrConflict, "%s: a second timer finds it decided", c.conv)
	}
}

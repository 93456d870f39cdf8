package analytics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestAnalytics_PerReviewer: a reviewer's approvals and rejections are
// counted under reviewer:<name> as an approver's; its escalations and
// refused approvals, and how humans then decided, too: a human deciding
// against the way it leaned overrules it, the same way upholds it, and
// an escalation without a lean counts neither.
func TestAnalytics_PerReviewer(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	a, _ := runAnalytics(t, env, nil)
	m := machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk}, nil
	})))
	ctx := t.Context()
	n := 0
	asked := func() string {
		t.Helper()
		n++
		e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint(n), ToolName: "Bash", CallerBotID: "bot", ConversationID: "rv"})
		require.NoError(t, err)
		return e.PendingID
	}
	bot := "reviewer:bot"
	decide := func(id, by string, approve bool, d machine.Decider) {
		t.Helper()
		_, err := m.Decide(ctx, id, machine.Decision{Approve: approve, By: by, DecidedBy: d})
		require.NoError(t, err)
	}
	review := func(id string, r machine.Review) {
		t.Helper()
		r.By = bot
		_, err := m.Review(ctx, id, r)
		require.NoError(t, err)
	}
	decide(asked(), bot, true, machine.DecidedByReviewer)
	decide(asked(), bot, false, machine.DecidedByReviewer)
	for _, tc := range []struct {
		r        machine.Review
		approves bool
	}{
		{machine.Review{Answer: machine.ReviewEscalate, Lean: machine.ReviewReject}, true},                // overruled
		{machine.Review{Answer: machine.ReviewEscalate, Lean: machine.ReviewReject}, false},               // upheld
		{machine.Review{Answer: machine.ReviewApprove, Lean: machine.ReviewApprove, Refused: "x"}, false}, // overruled
		{machine.Review{Answer: machine.ReviewEscalate}, true},                                            // no lean: neither
	} {
		id := asked()
		review(id, tc.r)
		decide(id, "alice", tc.approves, "")
	}
	waitCaughtUp(t, env, a)

	r, err := a.Report(t.Context(), analytics.ReportOptions{})
	require.NoError(t, err)
	by := map[string]wire.ApproverReport{}
	for _, ap := range r.Approvers {
		by[ap.Name] = ap
	}
	rv := by[bot]
	assert.EqualValues(t, 1, rv.Approved)
	assert.EqualValues(t, 1, rv.Rejected)
	require.NotNil(t, rv.Reviews)
	assert.Equal(t, wire.ReviewerReport{Escalated: 3, Refused: 1, Overruled: 2, Upheld: 1}, *rv.Reviews)
	assert.EqualValues(t, 2, by["alice"].Approved)
	assert.EqualValues(t, 2, by["alice"].Rejected)
	assert.Nil(t, by["alice"].Reviews, "a human's own stats have no reviews")
	assert.Equal(t, int64(2), r.Tools[0].DecidedBy[machine.DecidedByReviewer])
}

package policy

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

func TestParse_QuorumAndEscalateErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, want string }{
		{"default:\n  quorum: {deploy: {required: 1}}", `default.quorum["deploy"].required: must be 2 to 16 (one approval is no quorum), got 1`},
		{"default:\n  quorum: {deploy: {required: 3, of: [a, b]}}", `default.quorum["deploy"].of: lists 2 users, fewer than the 3 approvals required`},
		{"teams:\n  ops:\n    approvers: [a, b]\n    quorum: {deploy: {required: 3}}", `teams.ops.quorum["deploy"].required: 3 approvals, but the scope has only 2 approvers`},
		{"default:\n  quorum: {deploy: {required: 2, of: [a, a]}}", `default.quorum["deploy"].of[1]: "a" is listed twice`},
		{"default:\n  quorum: {deploy: {required: 2, rejectWhen: all}}", `default.quorum["deploy"].rejectWhen: must be any or majority, got "all"`},
		{"default:\n  quorum: {'Bash(rm': {required: 2}}", `default.quorum["Bash(rm"]: "Bash(rm": must end with ")"`},
		{"default:\n  quorum: {deploy: {required: 2, quorum: 3}}", `default.quorum["deploy"].quorum: unknown field`},
		{"default:\n  userIdToApprove: alice\n  quorum: {deploy: {required: 2}}", `default.quorum["deploy"].of: required: the scope's userIdToApprove is one approver, and 2 must approve`},
		{"default:\n  quorum: {deploy: {required: 2, rejectWhen: majority}}", `default.quorum["deploy"].rejectWhen: majority of whom: give of, or the scope's approvers`},
		{"default:\n  escalate: [{afterMs: 0, to: [a]}]", `default.escalate[0].afterMs: must be >= 1, got 0`},
		{"default:\n  escalate: [{afterMs: 2000, to: [a]}, {afterMs: 1000, to: [b]}]", `default.escalate[1].afterMs: must be later than the tier before (2000), got 1000`},
		{"default:\n  escalate: [{afterMs: 1000}]", `default.escalate[0].to: required: the users or groups who may decide the call from then on`},
	} {
		_, err := Parse([]byte(tc.doc))
		require.Error(t, err, tc.doc)
		assert.Contains(t, err.Error(), tc.want, tc.doc)
		assert.ErrorIs(t, err, machine.ErrInvalid)
	}
}

// A call a quorum pattern matches carries the largest quorum that
// matches, only when asked; a grant does not let it skip the question;
// escalation tiers come from the narrowest scope that sets them.
func TestEvaluate_QuorumAndEscalation(t *testing.T) {
	t.Parallel()
	grants := &memGrants{grants: []Grant{{Pattern: "Bash(terraform *)", ConversationID: "c1"}, {Pattern: "transfer_funds", ConversationID: "c1"}}}
	e := newTestEngine(t, `
default:
  requiresApprovalTools: all
  approvers: [alice, bob, carol]
  rules:
    allow: [web_search]
  quorum:
    "Bash(terraform destroy *)": {required: 2}
    "Bash(terraform destroy * -auto-approve)": {required: 3, rejectWhen: majority}
    web_search: {required: 2}
  escalate:
    - {afterMs: 60000, to: [oncall]}
teams:
  finance:
    quorum: {transfer_funds: {required: 2, of: [cfo, ceo]}}
    escalate: []
`, grants, nil)
	ctx := context.Background()
	eval := func(c testCall) machine.Verdict {
		t.Helper()
		v, err := e.Evaluate(ctx, c.call())
		require.NoError(t, err)
		return v
	}

	v := eval(testCall{tool: "Bash", args: `{"command":"terraform destroy -target=db"}`})
	assert.Equal(t, machine.ActionAsk, v.Action, "a grant does not cover a call under a quorum: %s", v.Reason)
	assert.Equal(t, &machine.Quorum{Required: 2}, v.Quorum)
	assert.Equal(t, []machine.EscalationTier{{After: time.Minute, To: []string{"oncall"}}}, v.Escalate)

	v = eval(testCall{tool: "Bash", args: `{"command":"terraform destroy -target=db -auto-approve"}`})
	assert.Equal(t, &machine.Quorum{Required: 3, RejectWhen: machine.RejectMajority}, v.Quorum, "the largest quorum that matches")

	v = eval(testCall{tool: "Bash", args: `{"command":"terraform plan"}`})
	assert.Equal(t, machine.ActionRun, v.Action, "no quorum: the grant covers it (%s)", v.Reason)

	v = eval(testCall{tool: "web_search", args: `{"query":"x"}`})
	assert.Equal(t, machine.ActionRun, v.Action, "a quorum says what an asked call needs, not that it is asked")
	assert.Nil(t, v.Quorum)

	v = eval(testCall{tool: "transfer_funds", args: `{"to":"x"}`, team: "finance"})
	assert.Equal(t, machine.ActionAsk, v.Action, v.Reason)
	assert.Equal(t, &machine.Quorum{Required: 2, Of: []string{"cfo", "ceo"}}, v.Quorum)
	assert.Nil(t, v.Escalate, "escalate: [] turns it off for the team")

	doc := e.Document()
	out, err := json.Marshal(doc)
	require.NoError(t, err)
	back, err := Parse(out)
	require.NoError(t, err, "%s", out)
	assert.Equal(t, doc, back, "a document with quorum and escalate reads back as it was written")
}

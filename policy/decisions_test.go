package policy

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

func TestParse_OnTimeoutAndRespondableErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, want string }{
		{"default:\n  onTimeout: {deploy: skip}", `default.onTimeout["deploy"]: must be reject, cancel or approve, got "skip"`},
		{"default:\n  onTimeout: {'Bash(rm': reject}", `default.onTimeout["Bash(rm"]: "Bash(rm": must end with ")"`},
		{"default:\n  respondable: ['Bash(rm']", `default.respondable[0]: "Bash(rm": must end with ")"`},
		// approve is refused where a deny rule, a quorum or a high risk
		// plainly covers the same calls, in any scope.
		{"default:\n  rules: {deny: [deploy]}\n  onTimeout: {deploy: approve}", `default.onTimeout["deploy"]: approve: rules.deny "deploy" (default) covers these calls`},
		{"default:\n  onTimeout: {'Bash(git status*)': approve}\nteams:\n  ops:\n    rules: {deny: [Bash]}", `default.onTimeout["Bash(git status*)"]: approve: rules.deny "Bash" (teams.ops) covers these calls`},
		{"default:\n  quorum: {deploy: {required: 2}}\n  approvers: [a, b]\n  onTimeout: {deploy: approve}", `default.onTimeout["deploy"]: approve: quorum["deploy"] (default) covers these calls`},
		{"default:\n  risk: {'mcp__db': high}\n  onTimeout: {mcp__db__query: approve}", `default.onTimeout["mcp__db__query"]: approve: risk["mcp__db"] high (default) covers these calls`},
	} {
		_, err := Parse([]byte(tc.doc))
		require.Error(t, err, tc.doc)
		assert.Contains(t, err.Error(), tc.want, tc.doc)
		assert.ErrorIs(t, err, machine.ErrInvalid)
	}
	// reject and cancel may sit under anything; a medium risk does not
	// hold a call for humans.
	_, err := Parse([]byte("default:\n  rules: {deny: [deploy]}\n  risk: {web_search: medium}\n  onTimeout: {deploy: cancel, web_search: approve}"))
	assert.NoError(t, err)
}

// An asked call carries the safest onTimeout of the patterns matching
// it, and whether it is respondable; the narrowest scope's respondable
// list replaces the wider ones'.
func TestEvaluate_OnTimeoutAndRespondable(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, `
default:
  requiresApprovalTools: all
  autoRejectOnTimeout: false
  onTimeout:
    "Bash(git status*)": approve
    "Bash": cancel
    web_search: approve
    deploy: reject
  respondable: [web_search, "Bash(date*)"]
teams:
  ops:
    respondable: []
`, nil, nil)
	ctx := context.Background()
	eval := func(c testCall) machine.Verdict {
		t.Helper()
		v, err := e.Evaluate(ctx, c.call())
		require.NoError(t, err)
		require.Equal(t, machine.ActionAsk, v.Action, v.Reason)
		return v
	}
	v := eval(testCall{tool: "web_search", args: `{"query":"x"}`})
	assert.Equal(t, machine.TimeoutApprove, v.OnTimeout)
	assert.True(t, v.Respondable)
	v = eval(testCall{tool: "Bash", args: `{"command":"git status"}`})
	assert.Equal(t, machine.TimeoutCancel, v.OnTimeout, "Bash cancels too: the safer wins")
	v = eval(testCall{tool: "deploy", args: `{}`})
	assert.Equal(t, machine.TimeoutReject, v.OnTimeout)
	assert.False(t, v.Respondable)
	v = eval(testCall{tool: "send_email", args: `{}`})
	assert.Empty(t, v.OnTimeout, "no pattern: autoRejectOnTimeout says")
	v = eval(testCall{tool: "Bash", args: `{"command":"date; rm -rf /"}`})
	assert.False(t, v.Respondable, "respondable matches as an allow rule: every command of the line")
	v = eval(testCall{tool: "web_search", args: `{"query":"x"}`, team: "ops"})
	assert.False(t, v.Respondable, "respondable: [] for the team")

	doc := e.Document()
	out, err := json.Marshal(doc)
	require.NoError(t, err)
	back, err := Parse(out)
	require.NoError(t, err, "%s", out)
	assert.Equal(t, doc, back, "a document with onTimeout and respondable reads back as it was written")
}

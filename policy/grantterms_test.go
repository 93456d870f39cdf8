package policy_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// TestGrantTerms_WhatThePolicySaysOfGrantingACall: noGrants patterns and
// noGrantsAtRisk (high unless set; none lifts it) leave a call approved
// once only, saying which rule; matchArgument names the argument a grant
// of a tool that is not built in may be narrowed by.
func TestGrantTerms_WhatThePolicySaysOfGrantingACall(t *testing.T) {
	t.Parallel()
	doc, err := policy.Parse([]byte(`
default:
  matchArgument: {send_email: to}
  noGrants: [transfer_funds, "Bash(git push *)"]
teams:
  labs:
    noGrantsAtRisk: none
  careful:
    noGrantsAtRisk: medium
`))
	require.NoError(t, err)
	e, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	call := func(tool, team, args string) machine.Call {
		return machine.Call{ToolName: tool, Team: team, Arguments: json.RawMessage(args)}
	}
	for _, tc := range []struct {
		call     machine.Call
		risk     machine.Risk
		argument string
		refusal  string
	}{
		{call("send_email", "", `{"to":"a@acme-corp.com"}`), "", "to", ""},
		{call("send_email", "", `{"to":"a@acme-corp.com"}`), machine.RiskMedium, "to", ""},
		{call("send_email", "", `{"to":"a@acme-corp.com"}`), machine.RiskHigh, "to", "noGrantsAtRisk high (built-in): the call's risk is high"},
		{call("send_email", "labs", `{"to":"a@acme-corp.com"}`), machine.RiskHigh, "to", ""},
		{call("send_email", "careful", `{"to":"a@acme-corp.com"}`), machine.RiskMedium, "to", "noGrantsAtRisk medium (teams.careful): the call's risk is medium"},
		{call("transfer_funds", "labs", `{"amount":1}`), "", "", `noGrants "transfer_funds" (default)`},
		{call("Bash", "", `{"command":"git push origin main"}`), "", "", `noGrants "Bash(git push *)" (default)`},
		{call("Bash", "", `{"command":"git status"}`), "", "", ""},
	} {
		got := e.GrantTerms(tc.call, tc.risk)
		assert.Equal(t, policy.GrantTerms{Argument: tc.argument, Refusal: tc.refusal}, got, "%s %s of team %q", tc.call.ToolName, tc.risk, tc.call.Team)
	}

	_, err = policy.Parse([]byte("default:\n  noGrantsAtRisk: extreme\n"))
	assert.ErrorContains(t, err, `default.noGrantsAtRisk: must be high, medium, low or none, got "extreme"`)
	_, err = policy.Parse([]byte("default:\n  noGrants: ['Bash(rm']\n"))
	assert.ErrorContains(t, err, `default.noGrants[0]: "Bash(rm"`)
}

// TestNarrowGrantPattern_CoversTheCallApprovedAndLikeOnes: a grant
// narrowed by the argument matchArgument names covers the calls whose
// argument the specifier matches, and no other; one that would not cover
// the call approved, or a tool whose argument nothing names, is refused.
func TestNarrowGrantPattern_CoversTheCallApprovedAndLikeOnes(t *testing.T) {
	t.Parallel()
	email := func(to string) machine.Call {
		return machine.Call{ToolName: "send_email", ConversationID: "c", Arguments: json.RawMessage(`{"to":"` + to + `","subject":"hi"}`)}
	}
	pattern, err := policy.NarrowGrantPattern(email("team@acme-corp.com"), "*@acme-corp.com", "to")
	require.NoError(t, err)
	assert.Equal(t, "send_email(*@acme-corp.com)", pattern)
	g := policy.Grant{Pattern: pattern, Argument: "to", ConversationID: "c", By: "alice"}
	assert.True(t, g.Allows(email("bob@acme-corp.com")))
	assert.False(t, g.Allows(email("someone@evil.example")))
	assert.False(t, policy.Grant{Pattern: pattern, ConversationID: "c", By: "alice"}.Allows(email("bob@acme-corp.com")),
		"without its argument a specifier on a tool that is not built in covers nothing")

	_, err = policy.NarrowGrantPattern(email("someone@evil.example"), "*@acme-corp.com", "to")
	assert.ErrorContains(t, err, "grantMatch: send_email(*@acme-corp.com) does not cover the call approved")
	_, err = policy.NarrowGrantPattern(email("a@acme-corp.com"), "*@acme-corp.com", "")
	assert.ErrorContains(t, err, "add matchArgument: {send_email: <argument name>} to the policy")
	bash, err := policy.NarrowGrantPattern(machine.Call{ToolName: "Bash", Arguments: json.RawMessage(`{"command":"git status -s"}`)}, "git status *", "")
	require.NoError(t, err)
	assert.Equal(t, "Bash(git status *)", bash)
	assert.Equal(t, "command", policy.ArgumentName("Bash", ""))
	assert.Equal(t, "to", policy.ArgumentName("send_email", "to"))
}

// TestCurrency_IsTheNarrowestScopes: a cost's currency comes from the
// narrowest scope that names one, and must be an ISO 4217 code.
func TestCurrency_IsTheNarrowestScopes(t *testing.T) {
	t.Parallel()
	doc, err := policy.Parse([]byte("default: {currency: EUR}\nteams: {us: {currency: USD}}\n"))
	require.NoError(t, err)
	e, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "EUR", e.Resolve("", "c").Currency)
	assert.Equal(t, "USD", e.Resolve("us", "c").Currency)
	v, err := e.Evaluate(t.Context(), machine.Call{ToolName: "pay", Team: "us", EstimatedCost: 3})
	require.NoError(t, err)
	assert.Equal(t, "USD", v.Currency)
	_, err = policy.Parse([]byte("default: {currency: euro}\n"))
	assert.ErrorContains(t, err, `default.currency: want an ISO 4217 code of three capital letters (EUR, USD), got "euro"`)
}

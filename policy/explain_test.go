package policy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// TestExplain_SaysWhichRuleMatchedAndWhy: every rule of the call's tool is
// listed, in the order checked, with whether it matched, which one decided,
// and the argument read.
func TestExplain_SaysWhichRuleMatchedAndWhy(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, filesPolicy+`teams:
  ops:
    rules: {ask: ["mcp__files__write_file(/etc/**)"], allow: ["Bash(ls)"]}
`, nil, nil)
	ctx := context.Background()
	x, err := e.Explain(ctx, testCall{tool: "mcp__files__write_file", team: "ops", args: `{"path":"/etc/cron.d/evil","content":"/tmp/x"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, x.Verdict.Action)
	assert.Equal(t, "path", x.Argument)
	assert.Equal(t, "/etc/cron.d/evil", x.Value)
	assert.Empty(t, x.Unreadable)
	type row struct {
		rule             string
		matched, decided bool
		why              string
	}
	var got []row
	for _, rc := range x.Rules {
		got = append(got, row{rc.Rule.String(), rc.Matched, rc.Decided, rc.Why})
	}
	assert.Equal(t, []row{
		{`rules.deny "mcp__files__write_file(/srv/secret/**)" (default)`, false, false, "it does not match path"},
		{`rules.ask "mcp__files__write_file(/etc/**)" (teams.ops)`, true, true, "it matches path"},
		{`rules.allow "mcp__files__write_file(/tmp/**)" (default)`, false, false, "it does not match path"},
	}, got, "Bash(ls) is not about this tool")

	x, err = e.Explain(ctx, testCall{tool: "mcp__files__write_file", args: `{"content":"/tmp/x"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionDeny, x.Verdict.Action)
	assert.Equal(t, "the call has no path argument", x.Unreadable)
	require.Len(t, x.Rules, 2)
	assert.True(t, x.Rules[0].Matched && x.Rules[0].Decided)
	assert.Equal(t, "it cannot read the call's argument (the call has no path argument), so it applies", x.Rules[0].Why)
	assert.False(t, x.Rules[1].Matched)
	assert.Equal(t, "it cannot read the call's argument (the call has no path argument), so it allows nothing", x.Rules[1].Why)
}

// TestUnreadableTools_NamesToolsNoArgumentIsNamedFor: a document built in
// code, with a specifier on a tool whose argument nothing names, is
// reported per tool, quoting no rule.
func TestUnreadableTools_NamesToolsNoArgumentIsNamedFor(t *testing.T) {
	t.Parallel()
	e, err := NewEngine(&Document{
		Default: &Policy{Rules: Rules{Deny: []string{"mcp__files__write_file(/srv/secret/**)", "mcp__git", "Bash(rm *)"}},
			MatchArgument: map[string]string{"send": "to"}, Risk: map[string]machine.Risk{"send(*@evil.io)": machine.RiskHigh}},
		Teams: map[string]*Policy{"ops": {MatchArgument: map[string]string{"mcp__files": "path"}}},
	}, nil, nil)
	require.NoError(t, err)
	tools := []string{"mcp__files__write_file", "mcp__files__read_file", "mcp__git__push", "Bash", "send"}
	got := e.UnreadableTools("", "c1", tools)
	assert.Equal(t, []string{"mcp__files__write_file"}, keys(got))
	assert.Equal(t, "the policy has rules on the arguments of mcp__files__write_file but names no argument for them to read, "+
		"so they deny or ask about its calls and allow none: the policy needs matchArgument: {mcp__files__write_file: <argument name>}",
		got["mcp__files__write_file"])
	assert.NotContains(t, got["mcp__files__write_file"], "/srv/secret")
	assert.Empty(t, e.UnreadableTools("ops", "c1", tools), "the team names the server's argument")
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

package policy

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// filesPolicy is docs/mcp-gateway.md's example rules for the filesystem
// server's write_file ({path, content}), and the matchArgument that says
// the rules on the server's tools read path.
const filesPolicy = `
default:
  rules:
    deny: ["mcp__files__write_file(/srv/secret/**)"]
    allow: ["mcp__files__write_file(/tmp/**)"]
  matchArgument: {mcp__files: path}
`

// TestEvaluate_SpecifierReadsTheNamedArgument: a rule on a tool that is
// not built in reads the argument matchArgument names and no other, so a
// write whose content looks like an allowed path is not allowed.
func TestEvaluate_SpecifierReadsTheNamedArgument(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, filesPolicy, nil, nil)
	ctx := context.Background()
	evaluate := func(args string) machine.Verdict {
		t.Helper()
		v, err := e.Evaluate(ctx, testCall{tool: "mcp__files__write_file", args: args}.call())
		require.NoError(t, err)
		return v
	}
	v := evaluate(`{"path":"/etc/cron.d/evil","content":"/tmp/x"}`)
	assert.Equal(t, machine.ActionAsk, v.Action, "content is not what the rules read: %s", v.Reason)
	assert.Equal(t, "requiresApprovalTools (built-in)", v.Reason)

	v = evaluate(`{"path":"/tmp/ok.txt","content":"hello"}`)
	assert.Equal(t, machine.ActionRun, v.Action, v.Reason)
	assert.Equal(t, `rules.allow "mcp__files__write_file(/tmp/**)" (default)`, v.Reason)

	v = evaluate(`{"path":"/srv/secret/x","content":"/tmp/x"}`)
	assert.Equal(t, machine.ActionDeny, v.Action, v.Reason)
	assert.Equal(t, `rules.deny "mcp__files__write_file(/srv/secret/**)" (default)`, v.Reason)
}

// TestEvaluate_UnreadableArgumentFailsClosed: a deny or ask rule whose
// specifier cannot read its argument (missing, not a string, or no
// matchArgument at all, as in a document built in code) applies, saying
// why; an allow rule does not.
func TestEvaluate_UnreadableArgumentFailsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newTestEngine(t, filesPolicy, nil, nil)
	for _, tt := range []struct{ args, why string }{
		{`{"content":"/tmp/x"}`, "the call has no path argument"},
		{`{"path":["/tmp/x"],"content":"/tmp/x"}`, "its path argument is an array, not a string"},
		{`{"path":7}`, "its path argument is a number, not a string"},
	} {
		v, err := e.Evaluate(ctx, testCall{tool: "mcp__files__write_file", args: tt.args}.call())
		require.NoError(t, err)
		assert.Equal(t, machine.ActionDeny, v.Action, tt.args)
		assert.Equal(t, `rules.deny "mcp__files__write_file(/srv/secret/**)" (default): the rule could not read the call's argument (`+tt.why+"), so it applies", v.Reason)
	}

	// Built in code, no matchArgument: the deny rule denies every call.
	coded, err := NewEngine(&Document{Default: &Policy{Rules: Rules{
		Ask:   []string{"mcp__files__write_file(/srv/**)"},
		Allow: []string{"mcp__files__write_file(/tmp/**)"},
	}}}, nil, nil)
	require.NoError(t, err, "the Engine takes a document Validate refuses, and fails closed on it")
	v, err := coded.Evaluate(ctx, testCall{tool: "mcp__files__write_file", args: `{"path":"/tmp/ok.txt"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action, v.Reason)
	assert.Contains(t, v.Reason, `rules.ask "mcp__files__write_file(/srv/**)" (default): the rule could not read the call's argument (no matchArgument names the argument of mcp__files__write_file it reads)`)

	// Allow only: a call without the argument is not allowed.
	allow := newTestEngine(t, "default:\n  rules: {allow: [\"mcp__files__write_file(/tmp/**)\"]}\n  matchArgument: {mcp__files: path}\n", nil, nil)
	v, err = allow.Evaluate(ctx, testCall{tool: "mcp__files__write_file", args: `{"content":"/tmp/x"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action, v.Reason)
	assert.Equal(t, "requiresApprovalTools (built-in)", v.Reason)
	v, err = allow.Evaluate(ctx, testCall{tool: "mcp__files__write_file", args: `{"path":"/tmp/a"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionRun, v.Action, "the server's key names the argument: %s", v.Reason)

	// Built-in tools keep their argument, and fail closed without it.
	builtin := newTestEngine(t, `default: {rules: {deny: ["WebFetch(domain:evil.io)", "Grep(secret/**)"], allow: ["WebFetch(domain:*)", "Grep"]}}`, nil, nil)
	for _, tt := range []struct {
		tool, args string
		action     machine.Action
	}{
		{"WebFetch", `{"url":"https://ok.io/x"}`, machine.ActionRun},
		{"WebFetch", `{"url":"/no/host"}`, machine.ActionDeny},
		{"WebFetch", `{}`, machine.ActionDeny},
		{"Grep", `{"pattern":"lib/*.go"}`, machine.ActionRun},
		{"Grep", `{"path":3,"pattern":"secret/x"}`, machine.ActionDeny},
		{"Grep", `{"query":"x"}`, machine.ActionDeny},
	} {
		v, err := builtin.Evaluate(ctx, testCall{tool: tt.tool, args: tt.args}.call())
		require.NoError(t, err)
		assert.Equal(t, tt.action, v.Action, "%s %s: %s", tt.tool, tt.args, v.Reason)
	}
}

// TestParse_RefusesASpecifierWithoutMatchArgument: Parse refuses a rule,
// risk, quorum or rate rule whose specifier on a tool that is not built
// in reads no argument matchArgument names in its scope or the default,
// naming the rule and the fix.
func TestParse_RefusesASpecifierWithoutMatchArgument(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`
default:
  rules:
    deny: ["mcp__files__write_file(/srv/secret/**)"]
    allow: ["mcp__files__write_file(/tmp/**)"]
`))
	require.Error(t, err)
	assert.ErrorIs(t, err, machine.ErrInvalid)
	assert.Equal(t, `policy: 2 problems:
	default.rules.deny[0]: "mcp__files__write_file(/srv/secret/**)": mcp__files__write_file is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {mcp__files__write_file: <argument name>} to default
	default.rules.allow[0]: "mcp__files__write_file(/tmp/**)": mcp__files__write_file is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {mcp__files__write_file: <argument name>} to default`, err.Error())
	var fe *FieldError
	require.True(t, errors.As(err, &fe))

	for _, tt := range []struct{ name, doc, want string }{
		{"a conversation's matchArgument does not reach the default scope", `
default: {rules: {ask: ["deploy(prod*)"]}}
conversations: {c1: {matchArgument: {deploy: env}}}`,
			`policy: default.rules.ask[0]: "deploy(prod*)": deploy is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {deploy: env} to default`},
		{"a team's does not reach a conversation", `
teams: {ops: {matchArgument: {deploy: env}}}
conversations: {c1: {rules: {deny: ["deploy(prod*)"]}}}`,
			`policy: conversations.c1.rules.deny[0]: "deploy(prod*)": deploy is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {deploy: env} to conversations.c1 or default`},
		{"a whole server needs the server's key", `
default:
  rules: {deny: ["mcp__files__*(/etc/**)"]}
  matchArgument: {mcp__files__write_file: path}`,
			`policy: default.rules.deny[0]: "mcp__files__*(/etc/**)": the pattern names every tool of mcp__files, so its specifier needs the argument named for the whole server: add matchArgument: {mcp__files: <argument name>} to default`},
		{"risk", "default: {risk: {\"pay(acct-*)\": high}}",
			`policy: default.risk["pay(acct-*)"]: "pay(acct-*)": pay is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {pay: <argument name>} to default`},
		{"quorum", "teams: {t: {quorum: {\"pay(acct-*)\": {required: 2}}}}",
			`policy: teams.t.quorum["pay(acct-*)"]: "pay(acct-*)": pay is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {pay: <argument name>} to teams.t or default`},
		{"rate rule", "default: {rateLimits: [{match: 'pay(acct-*)', max: 1, per: 1m}]}",
			`policy: default.rateLimits[0].match: "pay(acct-*)": pay is not a built-in tool, so nothing says which of its arguments the specifier reads: add matchArgument: {pay: <argument name>} to default`},
	} {
		_, err := Parse([]byte(tt.doc))
		if assert.Error(t, err, tt.name) {
			assert.Equal(t, tt.want, err.Error(), tt.name)
		}
	}

	for _, ok := range []string{
		"default: {rules: {deny: [\"mcp__files__*(/etc/**)\"]}, matchArgument: {mcp__files: path}}",
		"default: {rules: {deny: [\"mcp__files__write_file(/etc/**)\"]}, matchArgument: {mcp__files__*: path}}",
		"default: {matchArgument: {deploy: env}}\nteams: {ops: {rules: {deny: [\"deploy(prod*)\"]}}}",
		"conversations: {c1: {rules: {deny: [\"deploy(prod*)\"]}, matchArgument: {deploy: env}}}",
		"default: {rules: {deny: [\"deploy\", \"Bash(rm *)\", \"WebFetch(domain:x.io)\"]}}",
	} {
		_, err := Parse([]byte(ok))
		assert.NoError(t, err, ok)
	}
}

// TestParseStored_LoadsWhatParseNowRefuses: a stored document whose
// specifier reads no argument still loads, and fails closed in an
// Engine; anything else wrong is refused as Parse refuses it.
func TestParseStored_LoadsWhatParseNowRefuses(t *testing.T) {
	t.Parallel()
	old := []byte("default:\n  rules:\n    deny: [\"mcp__files__write_file(/srv/**)\"]\n    allow: [\"mcp__files__write_file(/tmp/**)\"]\n")
	_, err := Parse(old)
	require.Error(t, err)
	doc, err := ParseStored(old)
	require.NoError(t, err)
	e, err := NewEngine(doc, nil, nil)
	require.NoError(t, err)
	v, err := e.Evaluate(context.Background(), testCall{tool: "mcp__files__write_file", args: `{"path":"/tmp/a"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionDeny, v.Action, v.Reason)

	_, err = ParseStored([]byte("default: {approvalTimeoutMs: -1}"))
	assert.ErrorIs(t, err, machine.ErrInvalid)
}

// TestCovers_NeverOnAnUnreadableArgument: a grant or a batch's pattern
// has no policy's matchArgument: a specifier on a tool that is not built
// in covers no call, and a built-in tool's covers none without its
// argument.
func TestCovers_NeverOnAnUnreadableArgument(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ pattern, tool, args string }{
		{"mcp__files__write_file(/tmp/**)", "mcp__files__write_file", `{"path":"/tmp/a","content":"/tmp/b"}`},
		{"Write(/tmp/**)", "Write", `{"content":"/tmp/b"}`},
		{"WebFetch(domain:*)", "WebFetch", `{"url":"/path"}`},
	} {
		ok, err := Covers(tt.pattern, testCall{tool: tt.tool, args: tt.args}.call())
		require.NoError(t, err)
		assert.False(t, ok, "%s covers %s %s", tt.pattern, tt.tool, tt.args)
	}
	g := Grant{Pattern: "mcp__files__write_file", By: "alice"}
	assert.True(t, g.Allows(testCall{tool: "mcp__files__write_file", args: `{}`}.call()), "a tool's name alone covers every call")
}

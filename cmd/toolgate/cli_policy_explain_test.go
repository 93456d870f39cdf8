package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_PolicyExplain: `toolgate policy explain TOOL ARGS` prints how
// the policy in force decides a call: the verdict, the argument its rules
// read, and each rule naming the tool, matched or not and why; a write to
// /etc whose content looks like /tmp is not allowed, a call without the
// argument is denied by the rule that cannot read it. --team picks the
// team's rules; each flow whose then names the tool says whether an
// earlier call of the caller makes it apply; a viewer may ask, an agent
// may not; ARGS that are not a JSON object are a usage error.
func TestCLI_PolicyExplain(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake"}, Policy: `
default:
  rules:
    deny: ["mcp__files__write_file(/srv/secret/**)"]
    allow: ["mcp__files__write_file(/tmp/**)"]
  matchArgument: {mcp__files: path}
  flows: [{after: mcp__files__read_file, then: mcp__files__write_file, within: 1h, scope: caller}]
teams:
  ops:
    rules: {ask: ["mcp__files__write_file(/tmp/ops/**)"]}
`})
	url := served(t, g)

	r := cli(t, url, "policy", "explain", "mcp__files__write_file", `{"path":"/etc/cron.d/evil","content":"/tmp/x"}`, "--caller", "bot-1")
	require.Equal(t, 0, r.code, r.stderr)
	for _, line := range []string{
		`(?m)^mcp__files__write_file under the policy in force \(revision \d+\): ask$`,
		`(?m)^  reason:   requiresApprovalTools \(built-in\)$`,
		`(?m)^  argument: path = "/etc/cron\.d/evil"$`,
		`(?m)^  deny\[0\]\s+default\s+"mcp__files__write_file\(/srv/secret/\*\*\)"\s+no\s+it does not match path$`,
		`(?m)^  allow\[0\]\s+default\s+"mcp__files__write_file\(/tmp/\*\*\)"\s+no\s+it does not match path$`,
		`(?m)^  flows\[0\] "mcp__files__read_file" → "mcp__files__write_file" \(default\)\s+no\s+` +
			`no call of "mcp__files__read_file" completed in caller bot-1 within the last 1h$`,
	} {
		assert.Regexp(t, line, r.stdout)
	}
	assert.NotContains(t, r.stdout, "/tmp/ops", "the ops team's rule is not in force without --team ops")

	r = cli(t, url, "policy", "explain", "mcp__files__write_file", `{"path":"/tmp/ops/a"}`, "--team", "ops", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var reply wire.PolicyExplainReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &reply))
	assert.Equal(t, "ask", reply.Verdict)
	assert.Equal(t, `rules.ask "mcp__files__write_file(/tmp/ops/**)" (teams.ops)`, reply.Reason)
	require.Len(t, reply.Rules, 3)
	assert.Equal(t, wire.ExplainedRule{Scope: "teams.ops", Kind: "ask", Index: 0, Pattern: "mcp__files__write_file(/tmp/ops/**)",
		Matched: true, Decided: true, Why: "it matches path"}, reply.Rules[1])
	assert.True(t, reply.Rules[2].Matched && !reply.Rules[2].Decided, "the allow rule matches too; the ask rule is checked first")

	viewer := "--nats-creds=" + server.CredsPath(servetest.DataDir(t, url), "viewer")
	r = cli(t, url, "policy", "explain", "mcp__files__write_file", `{"content":"/tmp/x"}`, viewer)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^mcp__files__write_file under .*: deny$`, r.stdout)
	assert.Contains(t, r.stdout, "  argument: cannot be read: the call has no path argument\n")
	assert.Regexp(t, `(?m)^  deny\[0\]\s+default\s+\S+\s+yes, decided\s+it cannot read the call's argument \(the call has no path argument\), so it applies$`, r.stdout)

	r = cli(t, url, "policy", "explain", "send_email", viewer)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "no rule names send_email\n")

	r = cli(t, url, "policy", "explain", "mcp__files__write_file", `{}`, "--nats-creds="+server.CredsPath(servetest.DataDir(t, url), "agent"))
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "forbidden")
	r = cli(t, url, "policy", "explain", "mcp__files__write_file", `["/tmp/x"]`)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `ARGS: want a JSON object`)
	r = cli(t, url, "policy", "explain", "mcp__files__write_file", `{}`, "--mode", "yolo")
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "permissionMode")
}

// TestCLI_PolicyValidateRefusesAnUnreadableSpecifier: `policy validate`
// refuses a rule whose specifier on a tool that is not built in reads
// no argument, naming the rule and the fix, and takes it once
// matchArgument names the argument.
func TestCLI_PolicyValidateRefusesAnUnreadableSpecifier(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, "bad.yaml", "default:\n  rules:\n    allow: [\"mcp__files__write_file(/tmp/**)\"]\n")
	r := cli(t, "", "policy", "validate", bad)
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, `bad.yaml: policy: default.rules.allow[0]: "mcp__files__write_file(/tmp/**)": mcp__files__write_file is not a built-in tool, `+
		`so nothing says which of its arguments the specifier reads: add matchArgument: {mcp__files__write_file: <argument name>} to default`)
	good := writeFile(t, "good.yaml", "default:\n  rules:\n    allow: [\"mcp__files__write_file(/tmp/**)\"]\n  matchArgument: {mcp__files__write_file: path}\n")
	r = cli(t, "", "policy", "validate", good)
	assert.Equal(t, 0, r.code, r.stderr)
}

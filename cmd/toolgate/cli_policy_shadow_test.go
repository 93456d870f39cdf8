package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_PolicyShadow: `policy shadow set FILE` stores a candidate that
// every submit is then also evaluated against, enforcing nothing; `policy
// shadow report` counts the differences as `policy dry-run` of the same
// file counts them over the same calls; `promote --revision N` puts it in
// force and drops it; `clear` drops one. An agent may do none of it, and
// may not read it.
func TestCLI_PolicyShadow(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake"}, Policy: `
default:
  requiresApprovalTools: [web_search]
`})
	url := served(t, g)
	agentCreds := "--nats-creds=" + server.CredsPath(servetest.DataDir(t, url), "agent")
	viewer := "--nats-creds=" + server.CredsPath(servetest.DataDir(t, url), "viewer")
	candidate := writeFile(t, "candidate.yaml", "default:\n  requiresApprovalTools: [summarize]\n")

	r := cli(t, url, "policy", "shadow", "set", candidate, agentCreds)
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "forbidden")
	r = cli(t, url, "policy", "shadow", "get", viewer)
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "no shadow policy is set")
	r = cli(t, url, "policy", "shadow", "set", candidate)
	require.Equal(t, 0, r.code, r.stderr)
	m := regexp.MustCompile(`shadow policy from \S+candidate\.yaml set \(revision (\d+)\)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	rev := m[1]
	r = cli(t, url, "policy", "shadow", "get", viewer)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "summarize")
	assert.Contains(t, r.stderr, "shadow policy, revision "+rev)
	r = cli(t, url, "policy", "shadow", "get", agentCreds)
	assert.Equal(t, exitRefused, r.code)

	// 12 calls, decided by the policy in force: 6 searches asked about,
	// 6 summaries run; the shadow would do the opposite.
	bot := agent(t, url)
	var eg errgroup.Group
	for i := range 12 {
		eg.Go(func() error {
			tool := []string{"web_search", "summarize"}[i%2]
			e, err := bot.Submit(t.Context(), machine.Call{ToolCallID: fmt.Sprintf("s%d", i), ToolName: tool, CallerBotID: "bot-1",
				ConversationID: "shadow", Team: []string{"ops", "ops", "research", "research"}[i%4]})
			if err == nil && (e.Status == machine.StatePendingApproval) != (tool == "web_search") {
				err = fmt.Errorf("%s: %s, not as the policy in force says", tool, e.Status)
			}
			return err
		})
	}
	require.NoError(t, eg.Wait())
	var report wire.PolicyShadowReport
	bustest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the report counts the 12 calls", func() (bool, any) {
		r = cli(t, url, "policy", "shadow", "report", "--json", viewer)
		if r.code != 0 {
			return false, r.stderr
		}
		report = wire.PolicyShadowReport{}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
		return report.Calls == 12, r.stdout
	})
	r = cli(t, url, "policy", "dry-run", candidate, "--since", "1h", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var dry wire.PolicyDryRunReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &dry))
	assert.Equal(t, dry.Calls, report.Calls)
	assert.Equal(t, 12, report.Changed)
	assert.Equal(t, []wire.VerdictCount{{From: "allow", To: "ask", Calls: 6}, {From: "ask", To: "allow", Calls: 6}}, report.Verdicts)
	assert.Equal(t, dry.Verdicts, report.Verdicts)
	assert.Equal(t, dry.ByTool, report.ByTool)
	assert.Equal(t, dry.ByTeam, report.ByTeam)
	assert.True(t, report.Set)

	r = cli(t, url, "policy", "shadow", "report", "--examples", "1")
	require.Equal(t, 0, r.code, r.stderr)
	for _, line := range []string{
		`shadow policy revision ` + rev + ` \(set now; promote it with: toolgate policy shadow promote --revision ` + rev + `\)`,
		`12 calls compared from \d{4}-\d\d-\d\d \d\d:\d\d UTC to .*: 12 would change`,
		`(?m)^allow → ask\s+6$`, `(?m)^ask → allow\s+6$`,
		`(?m)^web_search\s+6\s+6\s+ask → allow 6$`, `(?m)^ops\s+6\s+6\s+allow → ask 3, ask → allow 3$`,
		`(?m)^allow → ask  shadow\.\S+  summarize  (ops|research)`, `(?m)^    shadow:   requiresApprovalTools \(default\)$`,
	} {
		assert.Regexp(t, line, r.stdout)
	}
	r = cli(t, url, "policy", "shadow", "report", "--since", "last week")
	assert.Equal(t, exitUsage, r.code)

	// Promote: admins only, and only the revision the shadow is at.
	r = cli(t, url, "policy", "shadow", "promote", "--revision", rev, agentCreds)
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "forbidden")
	r = cli(t, url, "policy", "shadow", "promote")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--revision: required")
	n, err := strconv.ParseUint(rev, 10, 64)
	require.NoError(t, err)
	r = cli(t, url, "policy", "shadow", "promote", "--revision", strconv.FormatUint(n+100, 10))
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "the shadow policy is at revision "+rev+" now")
	r = cli(t, url, "policy", "shadow", "promote", "--revision", rev)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `shadow policy revision `+rev+` in force \(policy revision \d+\); no shadow policy is set now`, r.stdout)
	r = cli(t, url, "policy", "get")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "summarize")
	assert.NotContains(t, r.stdout, "web_search")
	r = cli(t, url, "policy", "shadow", "get")
	assert.Equal(t, exitRefused, r.code)
	r = cli(t, url, "policy", "shadow", "report")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "shadow policy revision "+rev+" (no longer set)")

	// Clear: admins only; set again, cleared, and cleared when none is.
	r = cli(t, url, "policy", "shadow", "set", candidate)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, url, "policy", "shadow", "clear", agentCreds)
	assert.Equal(t, exitRefused, r.code)
	r = cli(t, url, "policy", "shadow", "clear")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `shadow policy revision \d+ cleared`, r.stdout)
	r = cli(t, url, "policy", "shadow", "clear")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "no shadow policy was set")
	r = cli(t, url, "policy", "shadow", "frobnicate")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `unknown action "frobnicate"`)
}

package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_PolicyDryRun: `toolgate policy dry-run FILE` prints what the
// candidate in FILE would change over the calls recorded, as a table and
// as JSON, counted as worked out by hand; --team narrows it, a viewer may
// run it on the policy `policy get` printed for them (secrets redacted)
// and an agent may not; a bad candidate or --since is refused, naming it.
func TestCLI_PolicyDryRun(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake"}, Policy: `
default:
  requiresApprovalTools: [web_search]
  matchArgument: {web_search: query}
  rules: {deny: ["web_search(forbidden *)"]}
  notify: [{type: webhook, url: "https://hooks.example.com/t", secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}]
`})
	url := served(t, g)
	// 24 calls: per 3, a search (ask, cost 1), a forbidden one (deny) and
	// a summary (allow, cost 3); even ones of ops, odd ones of research.
	bot := agent(t, url)
	var eg errgroup.Group
	eg.SetLimit(8)
	var day string
	for i := range 24 {
		eg.Go(func() error {
			c := machine.Call{ToolCallID: fmt.Sprintf("c%d", i), ToolName: "web_search", CallerBotID: "bot-1", ConversationID: "dry",
				Arguments: json.RawMessage(`{"query":"q"}`), EstimatedCost: 1, Team: []string{"ops", "research"}[i%2]}
			switch i % 3 {
			case 1:
				c.Arguments = json.RawMessage(`{"query":"forbidden fruit"}`)
			case 2:
				c.ToolName, c.Arguments, c.EstimatedCost = "summarize", nil, 3
			}
			e, err := bot.Submit(t.Context(), c)
			if i == 0 && err == nil {
				day = time.UnixMilli(e.RequestedAt).UTC().Format(time.DateOnly)
			}
			return err
		})
	}
	require.NoError(t, eg.Wait())

	// The candidate asks about summaries, not searches, and gives ops a
	// daily limit its searches pass.
	candidate := writeFile(t, "candidate.yaml", `
default:
  requiresApprovalTools: [summarize]
  matchArgument: {web_search: query}
  rules: {deny: ["web_search(forbidden *)"]}
teams:
  ops: {dailyCostLimit: 3}
`)
	r := cli(t, url, "policy", "dry-run", candidate, "--since", "1h", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var reply wire.PolicyDryRunReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &reply))
	assert.Equal(t, 24, reply.Calls)
	assert.Equal(t, 16, reply.Changed)
	assert.Equal(t, []wire.VerdictCount{{From: "allow", To: "ask", Calls: 8}, {From: "ask", To: "allow", Calls: 8}, {From: "deny", To: "deny", Calls: 8}}, reply.Verdicts)
	assert.Equal(t, []wire.DryRunBudget{
		{Team: "ops", Current: wire.DryRunSpend{AutoRunCost: 12, OverLimit: []wire.DryRunDay{}},
			Candidate: wire.DryRunSpend{AutoRunCost: 4, DailyCostLimit: new(3.0), OverLimit: []wire.DryRunDay{{Day: day, AutoRunCost: 4}}}},
		{Team: "research", Current: wire.DryRunSpend{AutoRunCost: 12, OverLimit: []wire.DryRunDay{}},
			Candidate: wire.DryRunSpend{AutoRunCost: 4, OverLimit: []wire.DryRunDay{}}},
	}, reply.Budgets)
	assert.Len(t, reply.Examples, 10, "the default 5 of each change")

	r = cli(t, url, "policy", "dry-run", candidate, "--examples", "1")
	require.Equal(t, 0, r.code, r.stderr)
	for _, line := range []string{
		`candidate.yaml against the policy in force \(revision \d+\), nothing changed`,
		`24 calls from \d{4}-\d\d-\d\d \d\d:\d\d UTC to .* \(every team\): 16 would change`,
		`(?m)^allow → ask\s+8$`, `(?m)^ask → allow\s+8$`, `(?m)^deny \(unchanged\)\s+8$`,
		`(?m)^web_search\s+16\s+8\s+ask → allow 8$`, `(?m)^summarize\s+8\s+8\s+allow → ask 8$`,
		`(?m)^ops\s+12\s+8\s+allow → ask 4, ask → allow 4$`,
		`(?m)^ops\s+12\s+4\s+3\s+` + day + ` \(4\)$`, `(?m)^research\s+12\s+4\s+none\s+-$`,
		`0 calls differ under the policy in force .*, 16 under the candidate`,
		`(?m)^allow → ask  dry\.\S+  summarize  (ops|research)`, `(?m)^    candidate: requiresApprovalTools \(default\)$`,
	} {
		assert.Regexp(t, line, r.stdout)
	}

	r = cli(t, url, "policy", "dry-run", candidate, "--team", "ops", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &reply))
	assert.Equal(t, 12, reply.Calls)
	assert.Equal(t, 8, reply.Changed)

	// A viewer tries the policy in force as `policy get` shows it to
	// them, its webhook's secret redacted: nothing would change.
	viewer := "--nats-creds=" + server.CredsPath(servetest.DataDir(t, url), "viewer")
	r = cli(t, url, "policy", "get", viewer)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "[redacted]")
	shown := writeFile(t, "shown.yaml", r.stdout)
	r = cli(t, url, "policy", "dry-run", shown, viewer)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "24 calls")
	assert.Contains(t, r.stdout, "0 would change")

	r = cli(t, url, "policy", "dry-run", candidate, "--nats-creds="+server.CredsPath(servetest.DataDir(t, url), "agent"))
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "forbidden")

	bad := writeFile(t, "bad.yaml", "default: {approvalTimeoutMs: -1}\n")
	r = cli(t, url, "policy", "dry-run", bad)
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "bad.yaml: policy: default.approvalTimeoutMs")
	r = cli(t, url, "policy", "dry-run", candidate, "--since", "last week")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `--since: want a duration (7d, 36h, 90m) or a date (2025-03-01, RFC 3339), got "last week"`)
	r = cli(t, url, "policy", "dry-run", candidate, "--since", "2999-01-01")
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "since: 2999-01-01T00:00:00Z is in the future")
}

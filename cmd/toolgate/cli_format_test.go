package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestPrintDryRun_CountsAgreeWithTheirWords: a count of one is followed by
// a singular noun and verb, any other by plural ones.
func TestPrintDryRun_CountsAgreeWithTheirWords(t *testing.T) {
	t.Parallel()
	print := func(r wire.PolicyDryRunReply) string {
		var b strings.Builder
		require.NoError(t, printDryRun(&b, "candidate.yaml", &r))
		return b.String()
	}
	one := print(wire.PolicyDryRunReply{Calls: 1, Skipped: 1, SkippedReason: "arguments: not an object", Recorded: wire.DryRunRecorded{Current: 1, Candidate: 1}})
	assert.Contains(t, one, "\n1 call from ")
	assert.Contains(t, one, "\n1 call could not be evaluated and is left out (arguments: not an object)\n")
	assert.Contains(t, one, "against the verdicts recorded: 1 call differs under the policy in force")
	two := print(wire.PolicyDryRunReply{Calls: 2, Skipped: 2, Recorded: wire.DryRunRecorded{Current: 2}})
	assert.Contains(t, two, "\n2 calls from ")
	assert.Contains(t, two, "\n2 calls could not be evaluated and are left out")
	assert.Contains(t, two, "against the verdicts recorded: 2 calls differ under the policy in force")
	none := print(wire.PolicyDryRunReply{})
	assert.Contains(t, none, "\n0 calls from ")
}

func TestCounted(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1 call", counted(1, "call", "calls"))
	assert.Equal(t, "0 calls", counted(0, "call", "calls"))
	assert.Equal(t, "2 events", counted(uint64(2), "event", "events"))
	assert.Equal(t, "1 hour", counted(int64(1), "hour", "hours"))
}

// cents is n times 0.01 summed in float64, as a version that summed so
// would have: 13 of them are 0.12999999999999998.
func cents(n int) float64 {
	sum := 0.0
	for range n {
		sum += 0.01
	}
	return sum
}

// TestPrintingMoney_NoFloatNoise: every table that prints money prints
// decimals, rounded to the millionth as toolgate counts it, whatever
// float64 noise the number carries.
func TestPrintingMoney_NoFloatNoise(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0.12999999999999998, cents(13), "the noise this test is about")
	noisy := cents(13)
	var b strings.Builder
	require.NoError(t, printBudgets(&b, []wire.Budget{{Team: "ops", Day: "2026-03-14", Limit: new(1.0), Reserved: cents(30), Spent: noisy}}))
	assert.Regexp(t, `(?m)^ops\s+2026-03-14\s+0\.3\s+0\.13\s+1$`, b.String())

	b.Reset()
	statsCallTable(&b, "TOOL", []wire.ToolReport{{Name: "report", Calls: 13, Cost: noisy}})
	assert.Regexp(t, `(?m)^report\s+13\s.*\s0\.13\s*$`, b.String())

	b.Reset()
	require.NoError(t, printDryRun(&b, "candidate.yaml", &wire.PolicyDryRunReply{Calls: 13, Budgets: []wire.DryRunBudget{{Team: "ops",
		Current:   wire.DryRunSpend{AutoRunCost: noisy},
		Candidate: wire.DryRunSpend{AutoRunCost: noisy, DailyCostLimit: new(0.1), OverLimit: []wire.DryRunDay{{Day: "2026-03-14", AutoRunCost: noisy}}}}}}))
	assert.Regexp(t, `(?m)^ops\s+0\.13\s+0\.13\s+0\.1\s+2026-03-14 \(0\.13\)$`, b.String())

	b.Reset()
	require.NoError(t, printEntry(&b, &machine.Entry{PendingID: "p", ToolName: "report", Status: machine.StateCompletedSuccess, EstimatedCost: cents(3), Cost: noisy}, time.Now()))
	assert.Regexp(t, `(?m)^Estimated cost:\s+0\.03$`, b.String())
	assert.Regexp(t, `(?m)^Cost:\s+0\.13$`, b.String())
	assert.NotContains(t, b.String(), "0.129999")

	b.Reset()
	require.NoError(t, printEntry(&b, &machine.Entry{PendingID: "p", ToolName: "report", Status: machine.StateCompletedSuccess, EstimatedCost: cents(3), Cost: noisy, Currency: "EUR"}, time.Now()))
	assert.Regexp(t, `(?m)^Estimated cost:\s+0\.03 EUR$`, b.String(), "with the policy's currency")
	assert.Regexp(t, `(?m)^Cost:\s+0\.13 EUR$`, b.String())

	assert.Equal(t, "2", formatMoney(2))
	assert.Equal(t, strconv.FormatFloat(1e300, 'f', -1, 64), formatMoney(1e300), "beyond micro-units, as it is")
}

// TestCLI_ShowOfAnEditedCallDescribesTheArgumentsThatRun: an approver's
// edit re-renders the call's description with the edited arguments, so
// show (and the entry) describe the call that will run.
func TestCLI_ShowOfAnEditedCallDescribesTheArgumentsThatRun(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, `
default:
  requiresApprovalTools: [send_email]
  describe: {send_email: 'mail {{.to}}: {{.subject}}'}
`)
	ctx := t.Context()
	bot := agent(t, url)
	e, err := bot.Submit(ctx, machine.Call{ToolCallID: "m", ToolName: "send_email", CallerBotID: "bot-1", ConversationID: "conv-mail",
		Arguments: json.RawMessage(`{"to":"all@example.com","subject":"launch"}`)})
	require.NoError(t, err)
	require.Equal(t, "mail all@example.com: launch", e.Description)

	r := cli(t, url, "approve", e.PendingID, as(t, url, "alice"), "--args", `{"to":"team@example.com","subject":"launch"}`)
	require.Equal(t, 0, r.code, r.stderr)
	got, err := bot.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, "mail team@example.com: launch", got.Description, "the entry describes the edited call")

	r = cli(t, url, "show", e.PendingID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^Description:\s+mail team@example\.com: launch$`, r.stdout)
	assert.NotContains(t, r.stdout, "mail all@example.com")
	assert.Regexp(t, `Original arguments:\s+\{"to":"all@example.com","subject":"launch"\} \(edited by the approver\)`, r.stdout)
}

// TestCLI_ShowSaysWhatDecided: show names what made a call's latest
// decision: a rule of the policy, or the approver who approved it (still
// after the call ran).
func TestCLI_ShowSaysWhatDecided(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, `
default:
  requiresApprovalTools: [deploy]
  rules: {deny: ["Bash(rm *)"]}
`)
	ctx := t.Context()
	bot := agent(t, url)
	denied, err := bot.Submit(ctx, machine.Call{ToolCallID: "rm", ToolName: "Bash", CallerBotID: "bot-1", ConversationID: "conv-decided",
		Arguments: json.RawMessage(`{"command":"rm -rf /tmp/x"}`)})
	require.NoError(t, err)
	r := cli(t, url, "show", denied.PendingID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^Decided by:\s+rule$`, r.stdout)

	asked, err := bot.Submit(ctx, machine.Call{ToolCallID: "d", ToolName: "deploy", CallerBotID: "bot-1", ConversationID: "conv-decided"})
	require.NoError(t, err)
	r = cli(t, url, "show", asked.PendingID)
	assert.Regexp(t, `(?m)^Decided by:\s+policy$`, r.stdout, "asked by requiresApprovalTools")
	r = cli(t, url, "approve", asked.PendingID, as(t, url, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, url, "show", asked.PendingID)
	assert.Regexp(t, `(?m)^Decided by:\s+human \(alice\)$`, r.stdout)
}

// TestBenchReport_CountsAgreeWithTheirWords: one agent on one CPU is said
// so, as two are "agents" and "CPUs".
func TestBenchReport_CountsAgreeWithTheirWords(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printBench(&b, &bench.Report{Agents: 1, Calls: 1, Target: "embedded", Host: bench.Host{CPUs: 1, Load: "0.5"}})
	assert.Contains(t, b.String(), "toolgate bench: embedded, 1 agent, 1 lifecycle a path, 1 CPU, load 0.5\n")
	b.Reset()
	printBench(&b, &bench.Report{Agents: 2, Calls: 2000, Target: "embedded", Host: bench.Host{CPUs: 2, Load: "0.5"}})
	assert.Contains(t, b.String(), "toolgate bench: embedded, 2 agents, 2000 lifecycles a path, 2 CPUs, load 0.5\n")
}

// TestPrintEntry_ShowsWhatReviewersSaid: each review that left the call
// to humans, and a reviewer's decision as who decided.
func TestPrintEntry_ShowsWhatReviewersSaid(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, printEntry(&b, &machine.Entry{PendingID: "p", ToolName: "Bash", Status: machine.StatePendingApproval, Reviews: []machine.Review{
		{By: "reviewer:bot", Answer: machine.ReviewEscalate, Lean: machine.ReviewReject, Reason: "it touches a .env file", At: 1},
		{By: "reviewer:ops", Answer: machine.ReviewApprove, Lean: machine.ReviewApprove, Refused: "the policy denies it", At: 2},
	}}, time.Now()))
	assert.Regexp(t, `(?m)^Reviewed:\s+reviewer:bot escalated, leaning reject, .*: it touches a \.env file$`, b.String())
	assert.Regexp(t, `(?m)^:?\s+reviewer:ops approved, refused \(the policy denies it\), `, b.String())

	b.Reset()
	require.NoError(t, printEntry(&b, &machine.Entry{PendingID: "p", ToolName: "Bash", Status: machine.StateApproved,
		DecidedBy: machine.DecidedByReviewer, ApprovedOrRejectedByUserID: "reviewer:bot"}, time.Now()))
	assert.Regexp(t, `(?m)^Decided by:\s+reviewer \(reviewer:bot\)$`, b.String())
}

// TestPrintEntry_ShowsHowTheDeciderSignedIn: a person the OpenID provider
// signed in is shown as the provider knows them.
func TestPrintEntry_ShowsHowTheDeciderSignedIn(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, printEntry(&b, &machine.Entry{PendingID: "p", ToolName: "Bash", Status: machine.StateApproved,
		DecidedBy: machine.DecidedByHuman, ApprovedOrRejectedByUserID: "alice", DecisionTime: 1,
		DeciderIdentity: &machine.Identity{Issuer: "https://id.example.com", Subject: "5f0c", Name: "Alice Liddell", Email: "alice@example.com"},
		DeciderViaGroup: "payments-leads"}, time.Now()))
	assert.Regexp(t, `(?m)^Signed in:\s+with single sign-on: Alice Liddell <alice@example.com>, subject 5f0c at https://id.example.com$`, b.String())
	assert.Regexp(t, `(?m)^Decided by:\s+alice \(group:payments-leads\), `, b.String(), "the group that let her decide")
}

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_GrantsAreListedBoundedAndRevoked: an approval for the session
// with --for records a grant that grants list shows (what it covers, who,
// from which call, when it ends) and that lets a like call run; revoked,
// the next like call is asked again. "always" from an approver is a
// grant, not a policy rule; only an admin may --persist-rule.
func TestCLI_GrantsAreListedBoundedAndRevoked(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: all}\n")
	ctx := t.Context()
	bot := agent(t, url)
	alice := as(t, url, "alice")

	first, err := bot.Submit(ctx, bashCall("conv-g", "1", "make test"))
	require.NoError(t, err)
	r := cli(t, url, "approve", first.PendingID, alice, "--scope", "session", "--for", "2h")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "later calls like it in conversation conv-g run without asking, for 2h0m0s")

	r = cli(t, url, "grants", "list", alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	grants := decode[[]wire.Grant](t, []byte(r.stdout))
	require.Len(t, grants, 1)
	g := grants[0]
	assert.Equal(t, "Bash(make test)", g.Pattern)
	assert.Equal(t, "conv-g", g.ConversationID)
	assert.Equal(t, "alice", g.By)
	assert.Equal(t, first.PendingID, g.PendingID)
	assert.InDelta(t, g.At+7_200_000, g.ExpiresAt, 1, "two hours after the decision")
	r = cli(t, url, "grants", "list", alice)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, g.ID+`\s+Bash\(make test\)\s+session conv-g\s+alice\s+`+first.PendingID+`\s+in (1h59m|2h)`, r.stdout)

	second, err := bot.Submit(ctx, bashCall("conv-g", "2", "make test"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateScheduled, second.Status, "the grant lets a like call run")

	r = cli(t, url, "grants", "revoke", g.ID, alice)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "revoked grant "+g.ID)
	third, err := bot.Submit(ctx, bashCall("conv-g", "3", "make test"))
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, third.Status, "asked again once revoked")
	r = cli(t, url, "grants", "revoke", g.ID, alice)
	assert.Equal(t, 1, r.code, "revoked already")

	// "always" from an approver: a grant for every conversation.
	r = cli(t, url, "approve", third.PendingID, alice, "--scope", "always")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "later calls like it among every team's calls run without asking, until revoked")
	elsewhere, err := bot.Submit(ctx, bashCall("conv-other", "1", "make test"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateScheduled, elsewhere.Status)
	r = cli(t, url, "policy", "get")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "make test", "no rule was written into the policy")

	pending, err := bot.Submit(ctx, bashCall("conv-p", "1", "make lint"))
	require.NoError(t, err)
	r = cli(t, url, "approve", pending.PendingID, alice, "--scope", "always", "--persist-rule")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "only an admin writes an approval into the policy")
	got, err := bot.Get(ctx, pending.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "the refused approval decided nothing")
	r = cli(t, url, "approve", pending.PendingID, "--scope", "always", "--persist-rule") // the admin
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, url, "policy", "get")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Bash(make lint)", "the admin's rule is in the policy")

	// A single-use grant lets one more like call run, then is gone.
	once, err := bot.Submit(ctx, bashCall("conv-once", "1", "make docs"))
	require.NoError(t, err)
	r = cli(t, url, "approve", once.PendingID, alice, "--scope", "session", "--single-use")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "run without asking, once, until revoked")
	r = cli(t, url, "grants", "list", "--conversation", "conv-once", alice)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "never, single use")
	next, err := bot.Submit(ctx, bashCall("conv-once", "2", "make docs"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateScheduled, next.Status, "the one call the grant lets run")
	after, err := bot.Submit(ctx, bashCall("conv-once", "3", "make docs"))
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, after.Status, "then it is gone")

	// A task grant covers the like calls of that task only.
	r = cli(t, url, "submit", "--tool", "Bash", "--args", `{"command":"make build"}`, "--conversation", "conv-task", "--task", "t-1", "--id", "b1", "--caller", "bot")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, url, "approve", "conv-task.b1", alice, "--scope", "task")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "later calls like it of task t-1 in conversation conv-task run without asking")
	sameTask := bashCall("conv-task", "b2", "make build")
	sameTask.TaskID = "t-1"
	got, err = bot.Submit(ctx, sameTask)
	require.NoError(t, err)
	assert.Equal(t, machine.StateScheduled, got.Status, "a like call of the task runs")
	otherTask := bashCall("conv-task", "b3", "make build")
	otherTask.TaskID = "t-2"
	got, err = bot.Submit(ctx, otherTask)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "another task's is asked")
	r = cli(t, url, "approve", got.PendingID, alice, "--scope", "task")
	require.Equal(t, 0, r.code, r.stderr)
	noTask, err := bot.Submit(ctx, bashCall("conv-task", "b4", "make dist"))
	require.NoError(t, err)
	r = cli(t, url, "approve", noTask.PendingID, alice, "--scope", "task")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "scope task: the call names no task")

	r = cli(t, url, "approve", pending.PendingID, alice, "--for", "1h")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "for: bounds a task, session or always grant")
}

// TestCLI_ApproveShowsWhatTheGrantCoversBeforeGranting: approve ID
// --scope session --dry-run prints the pattern the grant would record
// and changes nothing; the approval itself prints it again and records
// it; a call no pattern covers alone is refused before anything is
// decided, and --dry-run without a grant to show is a usage error.
func TestCLI_ApproveShowsWhatTheGrantCoversBeforeGranting(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: all}\n")
	ctx := t.Context()
	bot := agent(t, url)
	alice := as(t, url, "alice")
	e, err := bot.Submit(ctx, bashCall("conv-pv", "1", "npm test"))
	require.NoError(t, err)

	r := cli(t, url, "approve", e.PendingID, alice, "--scope", "session", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "would grant session conv-pv: Bash(npm test) (dry run, nothing decided)\n", r.stdout)
	r = cli(t, url, "approve", e.PendingID, alice, "--scope", "always", "--dry-run", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	p := decode[wire.GrantPreview](t, []byte(r.stdout))
	assert.Equal(t, wire.GrantPreview{PendingID: e.PendingID, ToolName: "Bash", Scope: machine.ScopeAlways, Pattern: "Bash(npm test)", Argument: "command"}, p)
	got, err := bot.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "a dry run decides nothing")
	r = cli(t, url, "grants", "list", alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, decode[[]wire.Grant](t, []byte(r.stdout)), "and grants nothing")

	r = cli(t, url, "approve", e.PendingID, alice, "--scope", "session")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "grants: Bash(npm test)\n")
	r = cli(t, url, "grants", "list", alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	grants := decode[[]wire.Grant](t, []byte(r.stdout))
	require.Len(t, grants, 1)
	assert.Equal(t, "Bash(npm test)", grants[0].Pattern, "the grant previewed is the grant recorded")

	compound, err := bot.Submit(ctx, bashCall("conv-pv", "2", "make && rm -rf build"))
	require.NoError(t, err)
	r = cli(t, url, "approve", compound.PendingID, alice, "--scope", "session")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no pattern covers this Bash call alone")
	got, err = bot.Get(ctx, compound.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "refused before anything was decided")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", compound.PendingID, "--dry-run"}, "--dry-run: with an ID, shows the grant a --scope task, session or always approval would record"},
		{[]string{"approve", compound.PendingID, "--scope", "session", "--dry-run", "--args", `{"command":"ls"}`}, "leave out --args"},
		{[]string{"reject", compound.PendingID, "--reason", "no", "--dry-run"}, "--dry-run: with --match only"},
	} {
		r := cli(t, url, append(c.args, alice)...)
		assert.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.want, "%v", c.args)
	}
}

// TestCLI_AGrantNarrowedToAnArgumentAndOneThePolicyForbids: --grant-match
// narrows a session grant of send_email to the recipients the policy's
// matchArgument reads: the next team email runs, one elsewhere asks. A
// call the policy approves once only (noGrants, or a high risk) is
// refused a grant before anything is decided.
func TestCLI_AGrantNarrowedToAnArgumentAndOneThePolicyForbids(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, `
default:
  requiresApprovalTools: all
  matchArgument: {send_email: to}
  noGrants: [transfer_funds]
  risk: {"Bash(git push --force *)": high}
`)
	ctx := t.Context()
	bot := agent(t, url)
	alice := as(t, url, "alice")
	email := func(id, to string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "send_email", CallerBotID: "bot-1", ConversationID: "newsletter",
			Arguments: json.RawMessage(`{"to":"` + to + `","subject":"Release notes"}`)}
	}
	first, err := bot.Submit(ctx, email("1", "team@acme-corp.com"))
	require.NoError(t, err)
	r := cli(t, url, "approve", first.PendingID, alice, "--scope", "session", "--grant-match", "*@acme-corp.com", "--for", "8h")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "grants: send_email(*@acme-corp.com)\n")
	r = cli(t, url, "grants", "list", alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	grants := decode[[]wire.Grant](t, []byte(r.stdout))
	require.Len(t, grants, 1)
	assert.Equal(t, "send_email(*@acme-corp.com)", grants[0].Pattern)
	assert.Equal(t, "to", grants[0].Argument)

	team, err := bot.Submit(ctx, email("2", "bob@acme-corp.com"))
	require.NoError(t, err)
	assert.NotEqual(t, machine.StatePendingApproval, team.Status, "the next team email runs without asking")
	evil, err := bot.Submit(ctx, email("3", "someone@evil.example"))
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, evil.Status, "one to someone else is asked about")

	r = cli(t, url, "approve", evil.PendingID, alice, "--scope", "session", "--grant-match", "*@acme-corp.com")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "send_email(*@acme-corp.com) does not cover the call approved")

	for _, c := range []struct {
		call machine.Call
		want string
	}{
		{machine.Call{ToolCallID: "4", ToolName: "transfer_funds", CallerBotID: "bot-1", ConversationID: "newsletter", Arguments: json.RawMessage(`{"amount":12500}`)},
			`the policy has this call approved once only, by noGrants "transfer_funds" (default)`},
		{bashCall("newsletter", "5", "git push --force origin main"),
			"the policy has this call approved once only, by noGrantsAtRisk high (built-in): the call's risk is high"},
	} {
		e, err := bot.Submit(ctx, c.call)
		require.NoError(t, err)
		r := cli(t, url, "approve", e.PendingID, alice, "--scope", "session")
		assert.Equal(t, 1, r.code, c.call.ToolName)
		assert.Contains(t, r.stderr, c.want)
		got, err := bot.Get(ctx, e.PendingID)
		require.NoError(t, err)
		assert.Equal(t, machine.StatePendingApproval, got.Status, "refused before anything was decided")
	}
}

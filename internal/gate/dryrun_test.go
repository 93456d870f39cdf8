package gate_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// The policy in force while the calls are recorded, and the candidate the
// dry run tries. Per kind of call (see dryRunCall):
//
//	kind  call                      in force  candidate
//	0     read_file                 allow     allow
//	1     web_search (cost 2)       ask       allow   (out of requiresApprovalTools)
//	2     deploy (cost 5)           ask       ask; research: deny (a team's deny rule)
//	3     Bash "npm test"           allow     allow
//	4     Bash "git push origin …"  ask       deny    (a deny rule)
//	5     Bash "ls"                 allow     ask     (its allow rule gone)
//	6     Bash "rm -rf build"       deny      deny
//	7     summarize (cost 1)        allow     allow   (ops: dailyCostLimit 100)
const (
	dryRunCurrent = `
default:
  requiresApprovalTools: [deploy, web_search, Bash]
  readOnlyTools: [read_file]
  rules:
    deny: ["Bash(rm *)"]
    allow: ["Bash(npm test)", "Bash(ls)"]
`
	dryRunCandidate = `
default:
  requiresApprovalTools: [deploy, Bash]
  readOnlyTools: [read_file]
  rules:
    deny: ["Bash(rm *)", "Bash(git push *)"]
    allow: ["Bash(npm test)"]
teams:
  research:
    rules: {deny: [deploy]}
  ops:
    dailyCostLimit: 100
`
)

// dryRunCall is the i-th recorded call: kind i%8 (the table above), team
// research, research, ops, ops, none for the 5 blocks of 8 calls in turn.
// Of 1,000 calls, each kind has 125: 50 research, 50 ops, 25 of no team.
func dryRunCall(i int) machine.Call {
	kinds := []struct {
		tool, command string
		cost          float64
	}{
		{"read_file", "", 0}, {"web_search", "", 2}, {"deploy", "", 5}, {"Bash", "npm test", 0},
		{"Bash", "git push origin main", 0}, {"Bash", "ls", 0}, {"Bash", "rm -rf build", 0}, {"summarize", "", 1},
	}
	k := kinds[i%8]
	args := map[string]any{"n": i}
	if k.command != "" {
		args = map[string]any{"command": k.command}
	}
	data, _ := json.Marshal(args)
	return machine.Call{ToolCallID: fmt.Sprintf("c%04d", i), ToolName: k.tool, Arguments: data,
		ConversationID: fmt.Sprintf("dr%d", i%10), Team: []string{"research", "research", "ops", "ops", ""}[(i/8)%5],
		EstimatedCost: k.cost}
}

// streamSeqs is the last sequence of every stream: every bucket's and
// every event's. Equal before and after, nothing was written.
func streamSeqs(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	seqs := map[string]uint64{}
	l := js.ListStreams(t.Context())
	for info := range l.Info() {
		seqs[info.Config.Name] = info.State.LastSeq
	}
	require.NoError(t, l.Err())
	return seqs
}

// TestPolicyDryRun_ThousandRecordedCalls: 1,000 calls recorded under one
// policy are replayed through a candidate, and the counts per change of
// verdict, per tool and per team, the budget effects and the examples are
// exactly those worked out by hand in the table above. An approver's
// edit does not count (the agent's arguments are replayed), the window
// and the team narrow the replay, and nothing is written.
func TestPolicyDryRun_ThousandRecordedCalls(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	t0 := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	doc, err := policy.Parse([]byte(dryRunCurrent))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine, Clock: clock})
	admin := gate.Actor{Name: "root", Roles: []wire.Role{wire.RoleAdmin}}
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleApprover}}
	vic := gate.Actor{Name: "vic", Roles: []wire.Role{wire.RoleViewer}}
	_, err = g.SetPolicy(ctx, admin, wire.PolicyDocument{Document: dryRunCurrent})
	require.NoError(t, err)

	// Ten days earlier: ten calls outside the default window.
	now.Store(t0.Add(-10 * 24 * time.Hour).UnixMilli())
	for i := range 10 {
		_, err := g.Submit(ctx, bot, machine.Call{ToolCallID: fmt.Sprintf("old%d", i), ToolName: "summarize",
			ConversationID: "old", Team: "archive", EstimatedCost: 1})
		require.NoError(t, err)
	}
	now.Store(t0.UnixMilli())
	var submitted [1000]*machine.Entry
	var eg errgroup.Group
	eg.SetLimit(16)
	for i := range submitted {
		eg.Go(func() error {
			e, err := g.Submit(ctx, bot, dryRunCall(i))
			submitted[i] = e
			return err
		})
	}
	require.NoError(t, eg.Wait())
	for i, e := range submitted {
		want := []machine.State{machine.StateScheduled, machine.StatePendingApproval, machine.StatePendingApproval, machine.StateScheduled,
			machine.StatePendingApproval, machine.StateScheduled, machine.StateRejectedByPolicy, machine.StateScheduled}[i%8]
		require.Equal(t, want, e.Status, "call %d recorded as the table says: %s", i, e.StatusReason)
	}
	// An approver edits a git push into npm test and approves it: the
	// dry run replays the push the agent asked for.
	edited, err := g.Decide(ctx, alice, wire.DecideRequest{PendingID: submitted[4].PendingID, Approved: true, Arguments: json.RawMessage(`{"command":"npm test"}`)})
	require.NoError(t, err)
	require.NotEmpty(t, edited.OriginalArguments)

	before := streamSeqs(t, env.JS)
	reply, err := g.PolicyDryRun(ctx, vic, wire.PolicyDryRunRequest{Document: dryRunCandidate, Examples: 2})
	require.NoError(t, err)

	vc := func(from, to string, n int) wire.VerdictCount { return wire.VerdictCount{From: from, To: to, Calls: n} }
	const allow, ask, deny = wire.VerdictAllow, wire.VerdictAsk, wire.VerdictDeny
	assert.Equal(t, t0.Add(-7*24*time.Hour).UnixMilli(), reply.Since, "the default window: 7 days")
	assert.Equal(t, t0.UnixMilli(), reply.Until)
	assert.NotZero(t, reply.PolicyRevision)
	assert.Equal(t, 1000, reply.Calls, "the old calls are outside the window")
	assert.Equal(t, 425, reply.Changed)
	assert.Equal(t, []wire.VerdictCount{
		vc(allow, ask, 125), vc(ask, allow, 125), vc(ask, deny, 175),
		vc(allow, allow, 375), vc(ask, ask, 75), vc(deny, deny, 125),
	}, reply.Verdicts)
	assert.Equal(t, []wire.DryRunGroup{
		{Name: "Bash", Calls: 500, Changed: 250, Verdicts: []wire.VerdictCount{vc(allow, ask, 125), vc(ask, deny, 125), vc(allow, allow, 125), vc(deny, deny, 125)}},
		{Name: "web_search", Calls: 125, Changed: 125, Verdicts: []wire.VerdictCount{vc(ask, allow, 125)}},
		{Name: "deploy", Calls: 125, Changed: 50, Verdicts: []wire.VerdictCount{vc(ask, deny, 50), vc(ask, ask, 75)}},
		{Name: "read_file", Calls: 125, Verdicts: []wire.VerdictCount{vc(allow, allow, 125)}},
		{Name: "summarize", Calls: 125, Verdicts: []wire.VerdictCount{vc(allow, allow, 125)}},
	}, reply.ByTool)
	assert.Equal(t, []wire.DryRunGroup{
		{Name: "research", Calls: 400, Changed: 200, Verdicts: []wire.VerdictCount{
			vc(allow, ask, 50), vc(ask, allow, 50), vc(ask, deny, 100), vc(allow, allow, 150), vc(deny, deny, 50)}},
		{Name: "ops", Calls: 400, Changed: 150, Verdicts: []wire.VerdictCount{
			vc(allow, ask, 50), vc(ask, allow, 50), vc(ask, deny, 50), vc(allow, allow, 150), vc(ask, ask, 50), vc(deny, deny, 50)}},
		{Name: "", Calls: 200, Changed: 75, Verdicts: []wire.VerdictCount{
			vc(allow, ask, 25), vc(ask, allow, 25), vc(ask, deny, 25), vc(allow, allow, 75), vc(ask, ask, 25), vc(deny, deny, 25)}},
	}, reply.ByTeam)
	none := []wire.DryRunDay{}
	assert.Equal(t, []wire.DryRunBudget{
		// Auto-run: summarize (1) under the policy in force; web_search
		// (2) and summarize under the candidate.
		{Team: "", Current: wire.DryRunSpend{AutoRunCost: 25, OverLimit: none}, Candidate: wire.DryRunSpend{AutoRunCost: 75, OverLimit: none}},
		{Team: "ops", Current: wire.DryRunSpend{AutoRunCost: 50, OverLimit: none},
			Candidate: wire.DryRunSpend{AutoRunCost: 150, DailyCostLimit: new(100.0), OverLimit: []wire.DryRunDay{{Day: "2025-03-14", AutoRunCost: 150}}}},
		{Team: "research", Current: wire.DryRunSpend{AutoRunCost: 50, OverLimit: none}, Candidate: wire.DryRunSpend{AutoRunCost: 150, OverLimit: none}},
	}, reply.Budgets)
	assert.Equal(t, wire.DryRunRecorded{Current: 0, Candidate: 425}, reply.Recorded, "recorded under the policy in force")
	assert.Zero(t, reply.Skipped)

	require.Len(t, reply.Examples, 6, "2 of each of the 3 changes")
	for i, ex := range reply.Examples {
		want := reply.Verdicts[i/2]
		assert.Equal(t, [2]string{want.From, want.To}, [2]string{ex.From, ex.To}, "example %d", i)
		assert.Equal(t, "bot", ex.CallerBotID)
		assert.Equal(t, t0.UnixMilli(), ex.RequestedAt)
		assert.NotEmpty(t, ex.Description)
	}
	ls := reply.Examples[0]
	assert.Equal(t, "Bash", ls.ToolName)
	assert.Equal(t, `rules.allow "Bash(ls)" (default)`, ls.CurrentReason)
	assert.Equal(t, "requiresApprovalTools (default)", ls.CandidateReason)
	assert.Equal(t, "web_search", reply.Examples[2].ToolName)
	assert.Contains(t, reply.Examples[4].CandidateReason, "rules.deny")

	// The window and the team narrow the replay.
	for _, c := range []struct {
		since      int64
		team       *string
		calls      int
		teams      []string
		approver   bool
		wantChange int
	}{
		{since: t0.Add(-11 * 24 * time.Hour).UnixMilli(), calls: 1010, teams: []string{"research", "ops", "", "archive"}, wantChange: 425},
		{since: t0.Add(-time.Hour).UnixMilli(), calls: 1000, teams: []string{"research", "ops", ""}, wantChange: 425},
		{team: new("ops"), calls: 400, teams: []string{"ops"}, wantChange: 150, approver: true},
		{team: new(""), calls: 200, teams: []string{""}, wantChange: 75},
		{since: t0.Add(-11 * 24 * time.Hour).UnixMilli(), team: new("archive"), calls: 10, teams: []string{"archive"}},
	} {
		a := vic
		if c.approver {
			a = alice
		}
		got, err := g.PolicyDryRun(ctx, a, wire.PolicyDryRunRequest{Document: dryRunCandidate, Since: c.since, Team: c.team})
		require.NoError(t, err)
		assert.Equal(t, c.calls, got.Calls, "%+v", c)
		assert.Equal(t, c.wantChange, got.Changed, "%+v", c)
		var teams []string
		for _, b := range got.ByTeam {
			teams = append(teams, b.Name)
		}
		assert.ElementsMatch(t, c.teams, teams, "%+v", c)
		assert.Len(t, got.Budgets, len(c.teams), "%+v", c)
	}

	// Refusals name what is wrong; an agent or an executor may not.
	for _, c := range []struct {
		a    gate.Actor
		r    wire.PolicyDryRunRequest
		err  error
		want string
	}{
		{vic, wire.PolicyDryRunRequest{Document: "default: {approvalTimeoutMs: -1}"}, machine.ErrInvalid, "candidate policy: default.approvalTimeoutMs"},
		{vic, wire.PolicyDryRunRequest{Document: "default: {requireApprovalTool: [x]}"}, machine.ErrInvalid, "default.requireApprovalTool: unknown field"},
		{vic, wire.PolicyDryRunRequest{Document: "default: [", Since: 1}, machine.ErrInvalid, "malformed document"},
		{vic, wire.PolicyDryRunRequest{Document: dryRunCandidate, Since: -5}, machine.ErrInvalid, "since: epoch milliseconds, got -5"},
		{vic, wire.PolicyDryRunRequest{Document: dryRunCandidate, Since: t0.Add(time.Hour).UnixMilli()}, machine.ErrInvalid, "since: 2025-03-14T13:00:00Z is in the future"},
		{vic, wire.PolicyDryRunRequest{Document: dryRunCandidate, Examples: 51}, machine.ErrInvalid, "examples: must be 1 to 50, got 51"},
		{bot, wire.PolicyDryRunRequest{Document: dryRunCandidate}, machine.ErrForbidden, "may not dry-run a policy"},
		{gate.Actor{Name: "x", Roles: []wire.Role{wire.RoleExecutor}}, wire.PolicyDryRunRequest{Document: dryRunCandidate}, machine.ErrForbidden, "may not dry-run a policy"},
	} {
		_, err := g.PolicyDryRun(ctx, c.a, c.r)
		require.ErrorIs(t, err, c.err, "%+v", c.r)
		assert.Contains(t, err.Error(), c.want)
	}
	assert.Equal(t, before, streamSeqs(t, env.JS), "no bucket and no stream written")
	stored, err := g.Policy(ctx, vic, wire.PolicyGetRequest{})
	require.NoError(t, err)
	assert.Equal(t, reply.PolicyRevision, stored.Revision, "the policy in force is as it was")
}

// TestPolicyDryRun_SpendIsSummedExactly: thirteen calls estimated at 0.01
// run without asking cost 0.13, which a daily limit of 0.13 holds and one
// of 0.12 does not.
func TestPolicyDryRun_SpendIsSummedExactly(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	const current = "default: {requiresApprovalTools: none}"
	doc, err := policy.Parse([]byte(current))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	admin := gate.Actor{Name: "root", Roles: []wire.Role{wire.RoleAdmin}}
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	vic := gate.Actor{Name: "vic", Roles: []wire.Role{wire.RoleViewer}}
	_, err = g.SetPolicy(ctx, admin, wire.PolicyDocument{Document: current})
	require.NoError(t, err)
	for i := range 13 {
		_, err := g.Submit(ctx, bot, machine.Call{ToolCallID: fmt.Sprint("cent-", i), ToolName: "summarize", ConversationID: "cents", Team: "ops", EstimatedCost: 0.01})
		require.NoError(t, err)
	}
	for limit, over := range map[string]bool{"0.13": false, "0.12": true} {
		reply, err := g.PolicyDryRun(ctx, vic, wire.PolicyDryRunRequest{Document: current + "\nteams: {ops: {dailyCostLimit: " + limit + "}}"})
		require.NoError(t, err)
		require.Len(t, reply.Budgets, 1)
		b := reply.Budgets[0]
		assert.Equal(t, 0.13, b.Current.AutoRunCost, "limit %s", limit)
		assert.Equal(t, 0.13, b.Candidate.AutoRunCost, "limit %s", limit)
		assert.Equal(t, over, len(b.Candidate.OverLimit) == 1, "limit %s: over it? %+v", limit, b.Candidate.OverLimit)
		data, err := json.Marshal(b.Current)
		require.NoError(t, err)
		assert.Contains(t, string(data), `"autoRunCost":0.13,`)
	}
}

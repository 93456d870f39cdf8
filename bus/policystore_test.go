package bus_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

const policyYAML = `
default:
  requiresApprovalTools: [web_search]
  rules:
    allow: ["Bash(npm test:*)"]
teams:
  finance:
    requiresApprovalTools: all
    approvers: [alice, bob]
`

func TestPolicyStore_SetRefusesInvalidAndKeepsTheOld(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := bus.NewPolicyStore(env.Buckets.Policies)

	doc, rev, err := s.Get(ctx)
	require.NoError(t, err)
	assert.Zero(t, rev)
	assert.Nil(t, doc.Default, "nothing stored: built-in defaults")

	good, err := policy.Parse([]byte(policyYAML))
	require.NoError(t, err)
	require.NoError(t, s.Set(ctx, good))

	bad := good.Clone()
	bad.Teams["finance"].ToolSpecificDelays = map[string]int64{"web_search": -5}
	err = s.Set(ctx, bad)
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.ErrorContains(t, err, `teams.finance.toolSpecificDelays["web_search"]`)

	stored, _, err := s.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, good, stored, "the refused document changed nothing")
}

func TestPolicyStore_LoadFileKeepsWhatTheStoredPolicyGrew(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := bus.NewPolicyStore(env.Buckets.Policies)

	loaded, err := s.LoadFile(ctx, []byte(policyYAML))
	require.NoError(t, err)
	assert.True(t, loaded)
	require.NoError(t, s.AddAllowRule(ctx, "finance", "transfer_funds"))
	require.NoError(t, s.AddAllowRule(ctx, "finance", "transfer_funds"), "adding a rule twice keeps one")

	// A restart with the same file keeps the rule an approver added.
	loaded, err = s.LoadFile(ctx, []byte(policyYAML))
	require.NoError(t, err)
	assert.False(t, loaded)
	doc, _, err := s.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"transfer_funds"}, doc.Teams["finance"].Rules.Allow)

	// An edited file is put in force.
	loaded, err = s.LoadFile(ctx, []byte(policyYAML+"    dailyCostLimit: 10\n"))
	require.NoError(t, err)
	assert.True(t, loaded)
	doc, _, err = s.Get(ctx)
	require.NoError(t, err)
	assert.Empty(t, doc.Teams["finance"].Rules.Allow)

	_, err = s.LoadFile(ctx, []byte("default: {approvalTimeoutMs: soon}"))
	assert.ErrorContains(t, err, "approvalTimeoutMs")
}

func TestPolicyStore_FollowChangesTheEngineLive(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := bus.NewPolicyStore(env.Buckets.Policies)
	engine, err := policy.NewEngine(nil, nil, nil)
	require.NoError(t, err)
	go func() { _ = s.Follow(ctx, engine, bustest.Logger()) }()

	call := machine.Call{ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), CallerBotID: "b", ConversationID: "c"}
	verdictFor := func() machine.Action {
		v, err := engine.Evaluate(ctx, call)
		require.NoError(t, err)
		return v.Action
	}
	assert.Equal(t, machine.ActionAsk, verdictFor(), "built-in default: ask")
	doc, err := policy.Parse([]byte("default: {requiresApprovalTools: none}"))
	require.NoError(t, err)
	require.NoError(t, s.Set(ctx, doc))
	assert.Eventually(t, func() bool { return verdictFor() == machine.ActionRun }, 5*time.Second, 5*time.Millisecond)
}

func TestGrantStore_MatchesOnlyItsConversation(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	g := bus.NewGrantStore(env.Buckets.Grants)
	_, err := g.Add(ctx, policy.Grant{Pattern: "Bash(git push origin main)", ConversationID: "conv-1", By: "alice"})
	require.NoError(t, err)
	_, err = g.Add(ctx, policy.Grant{Pattern: "Bash", By: "alice"})
	assert.ErrorIs(t, err, machine.ErrInvalid, "a grant without a conversation is not a session grant")

	push := machine.Call{ToolName: "Bash", Arguments: json.RawMessage(`{"command":"git push origin main"}`), ConversationID: "conv-1"}
	got, ok, err := g.Match(ctx, push)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "alice", got.By)

	push.ConversationID = "conv-2"
	_, ok, err = g.Match(ctx, push)
	require.NoError(t, err)
	assert.False(t, ok, "another conversation has no grant")
	push.ConversationID = "conv-1"
	push.Arguments = json.RawMessage(`{"command":"git push --force origin main"}`)
	_, ok, err = g.Match(ctx, push)
	require.NoError(t, err)
	assert.False(t, ok, "another command is not covered")
}

func TestBudgetLedger_RaceForTheLastOfABudget(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := bus.NewBudgetLedger(env.Buckets.Budgets)
	ok, err := l.Reserve(ctx, "finance", "2026-11-21", 900, 1000)
	require.NoError(t, err)
	require.True(t, ok)

	for round := range 20 {
		day := "2026-11-" + string(rune('a'+round))
		_, err := l.Reserve(ctx, "finance", day, 900, 1000)
		require.NoError(t, err)
		var wg sync.WaitGroup
		results := make([]bool, 2)
		for i := range results {
			wg.Go(func() {
				ok, err := l.Reserve(ctx, "finance", day, 100, 1000)
				assert.NoError(t, err)
				results[i] = ok
			})
		}
		wg.Wait()
		assert.ElementsMatch(t, []bool{true, false}, results, "round %d: exactly one gets the last 100", round)
	}
}

func TestBudgetLedger_SettleObserverReleasesAndSpends(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := bus.NewBudgetLedger(env.Buckets.Budgets)
	doc, err := policy.Parse([]byte("default: {requiresApprovalTools: none, dailyCostLimit: 100}"))
	require.NoError(t, err)
	day := time.Now().UTC().Format("2006-01-02")
	engine, err := policy.NewEngine(doc, nil, l)
	require.NoError(t, err)
	m := machine.New(env.Store, machine.WithEvaluator(engine), machine.WithObserver(l.SettleObserver(bustest.Logger())))

	submit := func(id string, cost float64) *machine.Entry {
		e, err := m.Submit(ctx, machine.Call{ToolCallID: id, ToolName: "report", CallerBotID: "b", ConversationID: "budget", EstimatedCost: cost})
		require.NoError(t, err)
		return e
	}
	ran := submit("a", 40)
	cancelled := submit("b", 50)
	assert.Equal(t, machine.StateScheduled, cancelled.Status)
	asked := submit("c", 20)
	assert.Equal(t, machine.StatePendingApproval, asked.Status, "no room for 20 more: asked")
	assert.Contains(t, asked.StatusReason, "dailyCostLimit")

	spending, err := l.Get(ctx, "", day)
	require.NoError(t, err)
	assert.Equal(t, bus.Spending{Reserved: 90}, spending)

	_, err = m.Cancel(ctx, cancelled.PendingID, "ops", "stop")
	require.NoError(t, err)
	_, err = m.Claim(ctx, ran.PendingID, "exec", time.Minute)
	require.NoError(t, err)
	_, err = m.Complete(ctx, ran.PendingID, machine.Outcome{Holder: "exec", Cost: 35})
	require.NoError(t, err)

	spending, err = l.Get(ctx, "", day)
	require.NoError(t, err)
	assert.Equal(t, bus.Spending{Reserved: 0, Spent: 35}, spending, "the cancel released 50, the run spent 35 of its 40")
}

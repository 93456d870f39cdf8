package bus_test

import (
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

func TestBudgetLedger_ListAllTeamsOrOne(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := bus.NewBudgetLedger(env.Buckets.Budgets)

	days, err := l.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, days)
	assert.NotNil(t, days, "an empty list, not null, for JSON")

	for _, r := range []struct {
		team, day string
		amount    float64
	}{
		{"ops", "2026-03-15", 2}, {"ops", "2026-03-14", 3}, {"ops2", "2026-03-14", 4},
		{"", "2026-03-14", 5}, {"data science/ml", "2026-03-14", 6},
	} {
		ok, err := l.Reserve(ctx, r.team, r.day, r.amount, 100)
		require.NoError(t, err)
		require.True(t, ok)
	}
	err = l.Settle(ctx, "ops", "2026-03-14", 3, 1.5)
	require.NoError(t, err)

	days, err = l.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []bus.DayBudget{
		{Team: "", Day: "2026-03-14", Reserved: 5},
		{Team: "data science/ml", Day: "2026-03-14", Reserved: 6},
		{Team: "ops", Day: "2026-03-14", Reserved: 0, Spent: 1.5},
		{Team: "ops", Day: "2026-03-15", Reserved: 2},
		{Team: "ops2", Day: "2026-03-14", Reserved: 4},
	}, days)

	days, err = l.ListTeam(ctx, "ops")
	require.NoError(t, err)
	assert.Equal(t, []bus.DayBudget{
		{Team: "ops", Day: "2026-03-14", Reserved: 0, Spent: 1.5},
		{Team: "ops", Day: "2026-03-15", Reserved: 2},
	}, days, "not ops2, whose name starts alike")

	days, err = l.ListTeam(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []bus.DayBudget{{Team: "", Day: "2026-03-14", Reserved: 5}}, days, "the team with no name is one team")

	days, err = l.ListTeam(ctx, "nobody")
	require.NoError(t, err)
	assert.Empty(t, days)
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

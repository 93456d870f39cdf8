package bus_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/consumer"
)

func TestBudgetLedger_RaceForTheLastOfABudget(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := bus.NewBudgetLedger(env.JS, env.Buckets.Budgets)
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

func TestBudgetLedger_SettleCountsEachSequenceOnce(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := bus.NewBudgetLedger(env.JS, env.Buckets.Budgets)
	const day = "2026-03-14"
	for _, amount := range []float64{3, 4, 5} {
		ok, err := l.Reserve(ctx, "ops", day, amount, 100)
		require.NoError(t, err)
		require.True(t, ok)
	}

	settled, err := l.Settle(ctx, "ops", day, 3, 2, 7, 0)
	require.NoError(t, err)
	assert.True(t, settled)
	settled, err = l.Settle(ctx, "ops", day, 3, 2, 7, 0)
	require.NoError(t, err)
	assert.False(t, settled, "sequence 7 is in already")
	s, err := l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, 9.0, s.Reserved)
	assert.Equal(t, 2.0, s.Spent)

	// Concurrent settlers of the same sequences: each counts once.
	var wg sync.WaitGroup
	for range 4 {
		for seq, amounts := range map[uint64][2]float64{9: {4, 4}, 12: {5, 0}} {
			wg.Go(func() {
				_, err := l.Settle(ctx, "ops", day, amounts[0], amounts[1], seq, 7)
				assert.NoError(t, err)
			})
		}
	}
	wg.Wait()
	s, err = l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, bus.Spending{Reserved: 0, Spent: 6, Applied: consumer.Applied{Floor: 7, Ranges: [][2]uint64{{9, 9}, {12, 12}}}}, s)

	settled, err = l.Settle(ctx, "ops", day, 1, 1, 11, 12)
	require.NoError(t, err)
	assert.False(t, settled, "at or below what every settler has settled: in already")

	// A reservation after settlements keeps their record.
	ok, err := l.Reserve(ctx, "ops", day, 1, 100)
	require.NoError(t, err)
	require.True(t, ok)
	settled, err = l.Settle(ctx, "ops", day, 1, 0.5, 13, 12)
	require.NoError(t, err)
	assert.True(t, settled)
	s, err = l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, bus.Spending{Reserved: 0, Spent: 6.5, Applied: consumer.Applied{Floor: 13}}, s, "the record folds into the floor")
}

func TestBudgetLedger_ListAllTeamsOrOne(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := bus.NewBudgetLedger(env.JS, env.Buckets.Budgets)

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
	_, err = l.Settle(ctx, "ops", "2026-03-14", 3, 1.5, 1, 0)
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

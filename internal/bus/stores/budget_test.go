package stores_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// money is x of the currency in micro-units, for short.
func money(x float64) policy.Micros { return policy.MicrosOf(x) }

func TestBudgetLedger_RaceForTheLastOfABudget(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
	ok, err := l.Reserve(ctx, "finance", "2026-11-21", money(900), money(1000))
	require.NoError(t, err)
	require.True(t, ok)

	for round := range 20 {
		day := "2026-11-" + string(rune('a'+round))
		_, err := l.Reserve(ctx, "finance", day, money(900), money(1000))
		require.NoError(t, err)
		var wg sync.WaitGroup
		results := make([]bool, 2)
		for i := range results {
			wg.Go(func() {
				ok, err := l.Reserve(ctx, "finance", day, money(100), money(1000))
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
	l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
	const day = "2026-03-14"
	for _, amount := range []float64{3, 4, 5} {
		ok, err := l.Reserve(ctx, "ops", day, money(amount), money(100))
		require.NoError(t, err)
		require.True(t, ok)
	}

	settled, err := l.Settle(ctx, "ops", day, money(3), money(2), 7, 0)
	require.NoError(t, err)
	assert.True(t, settled)
	settled, err = l.Settle(ctx, "ops", day, money(3), money(2), 7, 0)
	require.NoError(t, err)
	assert.False(t, settled, "sequence 7 is in already")
	s, err := l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, money(9), s.Reserved)
	assert.Equal(t, money(2), s.Spent)

	// Concurrent settlers of the same sequences: each counts once.
	var wg sync.WaitGroup
	for range 4 {
		for seq, amounts := range map[uint64][2]float64{9: {4, 4}, 12: {5, 0}} {
			wg.Go(func() {
				_, err := l.Settle(ctx, "ops", day, money(amounts[0]), money(amounts[1]), seq, 7)
				assert.NoError(t, err)
			})
		}
	}
	wg.Wait()
	s, err = l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, stores.Spending{Reserved: 0, Spent: money(6), Applied: consumer.Applied{Floor: 7, Ranges: [][2]uint64{{9, 9}, {12, 12}}}}, s)

	settled, err = l.Settle(ctx, "ops", day, money(1), money(1), 11, 12)
	require.NoError(t, err)
	assert.False(t, settled, "at or below what every settler has settled: in already")

	// A reservation after settlements keeps their record.
	ok, err := l.Reserve(ctx, "ops", day, money(1), money(100))
	require.NoError(t, err)
	require.True(t, ok)
	settled, err = l.Settle(ctx, "ops", day, money(1), money(0.5), 13, 12)
	require.NoError(t, err)
	assert.True(t, settled)
	s, err = l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, stores.Spending{Reserved: 0, Spent: money(6.5), Applied: consumer.Applied{Floor: 13}}, s, "the record folds into the floor")
}

func TestBudgetLedger_ListAllTeamsOrOne(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)

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
		ok, err := l.Reserve(ctx, r.team, r.day, money(r.amount), money(100))
		require.NoError(t, err)
		require.True(t, ok)
	}
	_, err = l.Settle(ctx, "ops", "2026-03-14", money(3), money(1.5), 1, 0)
	require.NoError(t, err)

	days, err = l.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []stores.DayBudget{
		{Team: "", Day: "2026-03-14", Reserved: money(5)},
		{Team: "data science/ml", Day: "2026-03-14", Reserved: money(6)},
		{Team: "ops", Day: "2026-03-14", Reserved: 0, Spent: money(1.5)},
		{Team: "ops", Day: "2026-03-15", Reserved: money(2)},
		{Team: "ops2", Day: "2026-03-14", Reserved: money(4)},
	}, days)

	days, err = l.ListTeam(ctx, "ops")
	require.NoError(t, err)
	assert.Equal(t, []stores.DayBudget{
		{Team: "ops", Day: "2026-03-14", Reserved: 0, Spent: money(1.5)},
		{Team: "ops", Day: "2026-03-15", Reserved: money(2)},
	}, days, "not ops2, whose name starts alike")

	days, err = l.ListTeam(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []stores.DayBudget{{Team: "", Day: "2026-03-14", Reserved: money(5)}}, days, "the team with no name is one team")

	days, err = l.ListTeam(ctx, "nobody")
	require.NoError(t, err)
	assert.Empty(t, days)
}

// TestBudgetLedger_SumsAreExact: amounts that float64 sums would blur
// (0.07 + 0.06, thirteen times 0.01) are kept, and listed, exactly.
func TestBudgetLedger_SumsAreExact(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
	const day = "2026-03-14"
	for _, amount := range []float64{0.07, 0.06} {
		ok, err := l.Reserve(ctx, "ops", day, money(amount), money(0.13))
		require.NoError(t, err)
		require.True(t, ok, "0.07 + 0.06 is 0.13, within a limit of 0.13")
	}
	ok, err := l.Reserve(ctx, "ops", day, 1, money(0.13))
	require.NoError(t, err)
	assert.False(t, ok, "and not a millionth more")
	for seq := range uint64(13) {
		_, err := l.Settle(ctx, "ops", day, 0, money(0.01), seq+1, 0)
		require.NoError(t, err)
	}
	s, err := l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, policy.Micros(130_000), s.Reserved)
	assert.Equal(t, policy.Micros(130_000), s.Spent)
	days, err := l.ListTeam(ctx, "ops")
	require.NoError(t, err)
	require.Len(t, days, 1)
	assert.Equal(t, "0.13", days[0].Spent.String())
	assert.Equal(t, 0.13, days[0].Spent.Float64(), "as the wire carries it")
}

// TestBudgetLedger_ReadsWhatAnOlderVersionStored: a day an older version
// stored, its amounts float64 sums, is read rounded to the millionth,
// changed with nothing it held lost, and written so that a process of
// that version still reads it.
func TestBudgetLedger_ReadsWhatAnOlderVersionStored(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
	const day = "2026-03-14"
	key := machine.KeyToken("team:ops") + "." + day
	_, err := env.Buckets.Budgets.Put(ctx, key,
		[]byte(`{"reserved":0.30000000000000004,"spent":0.12999999999999998,"applied":{"floor":4,"ranges":[[6,6]]},"write":"x"}`))
	require.NoError(t, err)

	s, err := l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, stores.Spending{Reserved: money(0.3), Spent: money(0.13), Applied: consumer.Applied{Floor: 4, Ranges: [][2]uint64{{6, 6}}}}, s)
	days, err := l.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []stores.DayBudget{{Team: "ops", Day: day, Reserved: money(0.3), Spent: money(0.13)}}, days)

	settled, err := l.Settle(ctx, "ops", day, money(0.1), money(0.07), 6, 0)
	require.NoError(t, err)
	assert.False(t, settled, "sequence 6, which the older version settled, counts once")
	settled, err = l.Settle(ctx, "ops", day, money(0.1), money(0.07), 7, 0)
	require.NoError(t, err)
	assert.True(t, settled)
	s, err = l.Get(ctx, "ops", day)
	require.NoError(t, err)
	assert.Equal(t, stores.Spending{Reserved: money(0.2), Spent: money(0.2), Applied: consumer.Applied{Floor: 4, Ranges: [][2]uint64{{6, 7}}}}, s)

	kve, err := env.Buckets.Budgets.Get(ctx, key)
	require.NoError(t, err)
	var stored map[string]any
	require.NoError(t, json.Unmarshal(kve.Value(), &stored))
	assert.Equal(t, map[string]any{"reservedMicros": 200_000.0, "spentMicros": 200_000.0}, map[string]any{"reservedMicros": stored["reservedMicros"], "spentMicros": stored["spentMicros"]})
	assert.Equal(t, 0.2, stored["reserved"], "an older version's process reads the amounts it knows")
	assert.Equal(t, 0.2, stored["spent"])
}

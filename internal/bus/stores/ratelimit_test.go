package stores_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/policy"
)

// TestRateCounters_RaceForTheLastSlots: 8 agents racing with 10 calls
// for a window of 3: exactly 3 are taken, every time, and the refused
// are told the window holds 3.
func TestRateCounters_RaceForTheLastSlots(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	c := stores.NewRateCounters(env.JS, env.Buckets.RateLimits)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const limit, calls, agents = 3, 10, 8
	for round := range 5 {
		key := policy.RateKey{Rule: "race", Scope: policy.RateByTeam, Value: string(rune('a' + round))}
		var taken, refused atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		for range agents {
			wg.Go(func() {
				for next.Add(1) <= calls {
					ok, n, err := c.Take(ctx, key, limit, 10*time.Minute, now)
					if !assert.NoError(t, err) {
						return
					}
					if ok {
						taken.Add(1)
						assert.LessOrEqual(t, n, limit)
					} else {
						refused.Add(1)
						assert.Equal(t, limit, n, "a refusal counts the full window")
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(limit), taken.Load(), "round %d: exactly max taken", round)
		assert.Equal(t, int64(calls-limit), refused.Load(), "round %d: the rest refused", round)
	}
}

// TestRateCounters_WindowSlides: a slot is held for per from when it was
// taken, then freed, one at a time; scopes and values count apart.
func TestRateCounters_WindowSlides(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	c := stores.NewRateCounters(env.JS, env.Buckets.RateLimits)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	key := policy.RateKey{Rule: "slide", Scope: policy.RateByCaller, Value: "bot-1"}
	take := func(at time.Duration) (bool, int) {
		t.Helper()
		ok, n, err := c.Take(ctx, key, 2, 10*time.Minute, t0.Add(at))
		require.NoError(t, err)
		return ok, n
	}
	ok, n := take(0)
	assert.True(t, ok)
	assert.Equal(t, 1, n)
	ok, n = take(4 * time.Minute)
	assert.True(t, ok)
	assert.Equal(t, 2, n)
	ok, n = take(9*time.Minute + 59*time.Second)
	assert.False(t, ok, "both slots held")
	assert.Equal(t, 2, n)
	ok, n = take(10 * time.Minute)
	assert.True(t, ok, "the first slot is freed ten minutes after it was taken")
	assert.Equal(t, 2, n)
	ok, _ = take(13 * time.Minute)
	assert.False(t, ok, "the second is held until 14m")
	ok, n = take(25 * time.Minute)
	assert.True(t, ok)
	assert.Equal(t, 1, n, "the window is empty again")

	// Another caller, another scope, the team with no name: apart.
	for _, other := range []policy.RateKey{
		{Rule: "slide", Scope: policy.RateByCaller, Value: "bot-2"},
		{Rule: "slide", Scope: policy.RateByTeam, Value: "bot-1"},
		{Rule: "slide", Scope: policy.RateByTeam, Value: ""},
		{Rule: "slide", Scope: policy.RateByAll},
	} {
		ok, n, err := c.Take(ctx, other, 1, time.Minute, t0)
		require.NoError(t, err)
		assert.True(t, ok, "%+v", other)
		assert.Equal(t, 1, n)
	}

	ws, err := c.Windows(ctx, "slide")
	require.NoError(t, err)
	require.Len(t, ws, 5)
	assert.Equal(t, policy.RateByAll, ws[0].Scope)
	assert.Equal(t, stores.RateWindow{Rule: "slide", Scope: policy.RateByCaller, Value: "bot-1", Slots: []int64{t0.Add(25 * time.Minute).UnixMilli()}}, ws[1])
	held, freed := ws[1].Live(t0.Add(30*time.Minute), 10*time.Minute)
	assert.Equal(t, 1, held)
	assert.Equal(t, t0.Add(35*time.Minute), freed)
	held, _ = ws[1].Live(t0.Add(35*time.Minute), 10*time.Minute)
	assert.Equal(t, 0, held)
	none, err := c.Windows(ctx, "other")
	require.NoError(t, err)
	assert.Empty(t, none)
}

package analytics

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDurations_QuantilesWithinFivePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []float64{10, 1e3, 1e5, 1e8} {
		var d Durations
		values := make([]int64, 5000)
		for i := range values {
			values[i] = 1 + int64(rng.ExpFloat64()*spread)
			d.Add(values[i])
		}
		slices.Sort(values)
		for _, q := range []float64{0.5, 0.9, 0.99} {
			exact := float64(values[int(math.Ceil(q*float64(len(values))))-1])
			got := d.Quantile(q)
			assert.InEpsilon(t, exact, got, 0.05, "spread %g q %g", spread, q)
		}
		var sum int64
		for _, v := range values {
			sum += v
		}
		assert.Equal(t, float64(sum)/float64(len(values)), d.MeanMs(), "the mean is exact")
		assert.LessOrEqual(t, len(d.Buckets), 260, "bounded")
	}
}

func TestDurations_MergeIsBucketwise(t *testing.T) {
	var a, b, all Durations
	for i := int64(0); i < 1000; i++ {
		if i%3 == 0 {
			a.Add(i * 37)
		} else {
			b.Add(i * 37)
		}
		all.Add(i * 37)
	}
	a.Merge(b)
	assert.Equal(t, all, a)
	var empty Durations
	assert.Zero(t, empty.Quantile(0.5))
	assert.Zero(t, empty.MeanMs())
}

func TestCountBounded_OverflowsIntoOther(t *testing.T) {
	var m map[string]int64
	for i := range 40 {
		m = countBounded(m, string(rune('a'+i)), 32)
	}
	require.Len(t, m, 33)
	assert.Equal(t, int64(8), m[otherKey])
	assert.Equal(t, noReasonGiven, reasonKey("  "))
	assert.LessOrEqual(t, len(reasonKey(string(make([]byte, 1000)))), maxReasonLen+len("…"))
}

package analytics

import (
	"math"
	"slices"

	"github.com/toolgate/toolgate/wire"
)

// Durations is a bounded histogram of durations in milliseconds, kept in
// an aggregate: log-scale buckets, eight to each doubling, so a quantile it
// reports is within 4.5% of the true one whatever the spread, and a month
// fits in about 250 buckets however many values went in. Bucket 0 holds
// values up to 1ms; bucket i > 0 holds (2^((i-1)/8), 2^(i/8)] ms. Two
// histograms add up bucket by bucket, so a team's, a tool's and the total
// are all exact merges.
type Durations struct {
	Count   int64         `json:"count"`
	SumMs   int64         `json:"sumMs"`
	Buckets map[int]int64 `json:"buckets,omitempty"`
}

// bucketsPerDoubling sets the resolution: 2^(1/8) ≈ 1.09 between bounds.
const bucketsPerDoubling = 8

func bucketOf(ms int64) int {
	if ms <= 1 {
		return 0
	}
	return int(math.Ceil(math.Log2(float64(ms)) * bucketsPerDoubling))
}

// bucketValue is what a bucket stands for: the geometric middle of its
// bounds, which is off by at most 2^(1/16) ≈ 4.4% from anything in it.
func bucketValue(i int) float64 {
	if i == 0 {
		return 1
	}
	return math.Exp2((float64(i) - 0.5) / bucketsPerDoubling)
}

// Add counts one duration; negative ones count as 0.
func (d *Durations) Add(ms int64) {
	ms = max(ms, 0)
	if d.Buckets == nil {
		d.Buckets = map[int]int64{}
	}
	d.Buckets[bucketOf(ms)]++
	d.Count++
	d.SumMs += ms
}

// Merge adds o's counts to d's.
func (d *Durations) Merge(o Durations) {
	if o.Count == 0 {
		return
	}
	if d.Buckets == nil {
		d.Buckets = map[int]int64{}
	}
	for i, n := range o.Buckets {
		d.Buckets[i] += n
	}
	d.Count += o.Count
	d.SumMs += o.SumMs
}

// MeanMs is the exact mean, 0 for no values.
func (d *Durations) MeanMs() float64 {
	if d.Count == 0 {
		return 0
	}
	return float64(d.SumMs) / float64(d.Count)
}

// Quantile estimates the q-quantile (0 < q <= 1) by nearest rank: the
// value of the bucket holding the ceil(q*count)-th smallest value.
func (d *Durations) Quantile(q float64) float64 {
	if d.Count == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(q*float64(d.Count))), 1)
	idx := make([]int, 0, len(d.Buckets))
	for i := range d.Buckets {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var seen int64
	for _, i := range idx {
		seen += d.Buckets[i]
		if seen >= rank {
			return bucketValue(i)
		}
	}
	return bucketValue(idx[len(idx)-1])
}

// Summary returns count, mean, p50 and p90, rounded to the millisecond.
func (d *Durations) Summary() wire.DurationSummary {
	return wire.DurationSummary{
		Count:  d.Count,
		MeanMs: math.Round(d.MeanMs()),
		P50Ms:  math.Round(d.Quantile(0.5)),
		P90Ms:  math.Round(d.Quantile(0.9)),
	}
}

package metrics

import (
	"math"
	"slices"
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

// DurationSummary is what a report says of a Durations.
type DurationSummary struct {
	Count  int64   `json:"count"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
}

// Summary returns count, mean, p50 and p90, rounded to the millisecond.
func (d *Durations) Summary() DurationSummary {
	return DurationSummary{
		Count:  d.Count,
		MeanMs: math.Round(d.MeanMs()),
		P50Ms:  math.Round(d.Quantile(0.5)),
		P90Ms:  math.Round(d.Quantile(0.9)),
	}
}

// Applied is the set of TOOL_EVENTS stream sequences an aggregate has
// taken in: every sequence up to Floor, and the ranges above it. It is what
// makes applying an event to an aggregate idempotent (see Analytics).
type Applied struct {
	Floor  uint64      `json:"floor"`
	Ranges [][2]uint64 `json:"ranges,omitempty"` // sorted, disjoint, not touching, all above Floor
}

// Has reports whether seq is in the set.
func (a *Applied) Has(seq uint64) bool {
	if seq <= a.Floor {
		return true
	}
	for _, r := range a.Ranges {
		if seq >= r[0] && seq <= r[1] {
			return true
		}
	}
	return false
}

// Add puts the ranges (inclusive) in the set.
func (a *Applied) Add(ranges [][2]uint64) {
	all := append(slices.Clone(a.Ranges), ranges...)
	slices.SortFunc(all, func(x, y [2]uint64) int {
		switch {
		case x[0] < y[0]:
			return -1
		case x[0] > y[0]:
			return 1
		}
		return 0
	})
	merged := all[:0]
	for _, r := range all {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1]+1 {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	a.Ranges = merged
	a.Raise(a.Floor)
}

// Raise puts every sequence up to floor in the set, and folds into Floor
// the ranges it now reaches, so a set kept in step with the consumer's ack
// floor stays a handful of numbers.
func (a *Applied) Raise(floor uint64) {
	a.Floor = max(a.Floor, floor)
	keep := a.Ranges[:0]
	for _, r := range a.Ranges {
		switch {
		case r[1] <= a.Floor:
		case r[0] <= a.Floor+1:
			a.Floor = r[1]
		default:
			keep = append(keep, r)
		}
	}
	a.Ranges = keep
	if len(a.Ranges) == 0 {
		a.Ranges = nil
	}
}

// seqRanges turns sequences into sorted inclusive ranges.
func seqRanges(seqs []uint64) [][2]uint64 {
	s := slices.Clone(seqs)
	slices.Sort(s)
	var out [][2]uint64
	for _, q := range s {
		if n := len(out); n > 0 && q <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], q)
			continue
		}
		out = append(out, [2]uint64{q, q})
	}
	return out
}

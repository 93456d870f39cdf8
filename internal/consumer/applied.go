package consumer

import "slices"

// Applied is the set of stream sequences a value kept by a consumer has
// taken in: every sequence up to Floor, and the ranges above it. Written in
// the same compare-and-set as the effect itself, it makes applying a
// message idempotent although the message may be delivered twice, or to
// two processes at once (the analytics aggregates, the budget ledger).
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

// SeqRanges turns sequences into sorted inclusive ranges.
func SeqRanges(seqs []uint64) [][2]uint64 {
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

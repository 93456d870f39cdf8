package analytics

import (
	"context"
	"time"
)

// CrashAfterApply sets a failure point: when f returns an error, Run stops
// after writing a batch's aggregates and before acknowledging it, as a
// process that died there would.
func CrashAfterApply(a *Analytics, f func(seqs []uint64) error) { a.afterApply = f }

// SetClock replaces time.Now, for reports.
func SetClock(a *Analytics, now func() time.Time) { a.now = now }

// RaiseCheckpoint raises gen's checkpoint to seq as a process that last
// read it before any write would, and returns what the key then holds.
func RaiseCheckpoint(ctx context.Context, a *Analytics, gen, seq uint64) (uint64, error) {
	var cp checkpointAt
	if err := a.raise(ctx, gen, &cp, seq); err != nil {
		return 0, err
	}
	cp, err := a.checkpoint(ctx, gen)
	return cp.seq, err
}

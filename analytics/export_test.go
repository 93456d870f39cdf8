package analytics

import "time"

// CrashAfterApply sets a failure point: when f returns an error, Run stops
// after writing a batch's aggregates and before acknowledging it, as a
// process that died there would.
func CrashAfterApply(a *Analytics, f func(seqs []uint64) error) { a.afterApply = f }

// SetClock replaces time.Now, for reports.
func SetClock(a *Analytics, now func() time.Time) { a.now = now }

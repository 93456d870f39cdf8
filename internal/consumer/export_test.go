package consumer

import "time"

// SetStallBound sets how long a consumer may stall before its run acts,
// for the length of a test.
func SetStallBound(d time.Duration) (restore func()) {
	old := stallBound
	stallBound = d
	return func() { stallBound = old }
}

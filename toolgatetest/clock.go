package toolgatetest

import (
	"sync"
	"time"
)

// Clock is the tests' settable clock, for Options.Clock or anything else
// that takes a func() time.Time. Until Set it reads time.Now, moved by
// what Skip added; once Set it stands still where it was put.
type Clock struct {
	mu    sync.Mutex
	fixed bool
	t     time.Time
	skew  time.Duration
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fixed {
		return c.t
	}
	return time.Now().Add(c.skew)
}

// Set stops the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fixed, c.t = true, t
}

// Skip moves the clock d ahead (behind, if d is negative).
func (c *Clock) Skip(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.skew += d
}

// FixedClock returns a Clock stopped at t.
func FixedClock(t time.Time) *Clock {
	c := new(Clock)
	c.Set(t)
	return c
}

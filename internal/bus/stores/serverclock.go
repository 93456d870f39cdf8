package stores

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ServerClock tells the time by the NATS server's clock: the process's
// own clock corrected by its offset to the clock of the server that leads
// a bucket's stream, as the time in that server's stream info says. Every
// toolgate process that tells deadlines and leases by it agrees with the
// others within their round trips to the server, however far off their
// own clocks are: a timer whose machine runs 30 s fast does not expire
// approvals 30 s early, and an intake whose machine runs slow does not
// take a lease from a live holder.
type ServerClock struct {
	kv     jetstream.KeyValue
	local  func() time.Time
	offset atomic.Int64 // nanoseconds to add to local
	// uncertainty is half the round trip of the sample the offset came
	// from: how far it may be off the server's clock.
	uncertainty atomic.Int64
}

// NewServerClock returns a clock over local (nil: time.Now) that Sync
// sets by the server leading kv's stream. Until it is synced, it is
// local.
func NewServerClock(kv jetstream.KeyValue, local func() time.Time) *ServerClock {
	if local == nil {
		local = time.Now
	}
	return &ServerClock{kv: kv, local: local}
}

// Now is the server's time, as well as this process knows it.
func (c *ServerClock) Now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load()))
}

// Offset is what Now adds to the process's own clock, and how far it may
// be off the server's (half the round trip it was measured in).
func (c *ServerClock) Offset() (offset, uncertainty time.Duration) {
	return time.Duration(c.offset.Load()), time.Duration(c.uncertainty.Load())
}

// clockSamples is how many times Sync asks the server for its time: the
// answer that came back soonest is the most exact.
const clockSamples = 3

// Sync measures the offset of the process's clock to the server's: the
// server's time in the middle of the quickest of a few round trips. It
// logs the offset when the process's own clock is more than a second off.
// A server that reports no time (older than 2.10) leaves the clock as it
// was and says so.
func (c *ServerClock) Sync(ctx context.Context, log *slog.Logger) error {
	best := time.Duration(-1)
	var offset time.Duration
	for range clockSamples {
		sent := c.local()
		st, err := c.kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("the NATS server's time: %w", err)
		}
		back := c.local()
		s, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok || s.StreamInfo().TimeStamp.IsZero() {
			return errors.New("the NATS server's time: its stream info has none (nats-server 2.10 or later reports it)")
		}
		rtt := back.Sub(sent)
		if best < 0 || rtt < best {
			best = rtt
			offset = s.StreamInfo().TimeStamp.Sub(sent.Add(rtt / 2))
		}
	}
	c.offset.Store(int64(offset))
	c.uncertainty.Store(int64(best / 2))
	if offset.Abs() > time.Second {
		log.Warn("this machine's clock is off the NATS server's: toolgate tells deadlines and leases by the server's", "offset", offset.Round(time.Millisecond), "within", (best / 2).Round(time.Microsecond))
	}
	return nil
}

// Run syncs the clock every interval until ctx ends. A sync that fails
// keeps the offset measured before.
func (c *ServerClock) Run(ctx context.Context, every time.Duration, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.Sync(ctx, log); err != nil && ctx.Err() == nil {
			log.Warn("telling the time by the NATS server's clock: the offset measured before stands", "err", err)
		}
	}
}

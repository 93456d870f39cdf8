package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A durable consumer stalls when it gets nothing while its stream holds
// messages for it: its leader was cut off and no other has taken over,
// its pull requests went to a server that died, its deliveries are lost
// on the way. Each run of a consumer (a Runner's, the relay's) keeps a
// watch on it (WatchStall): every second it reads the consumer's state
// from the server and, when for StallBound nothing was delivered or
// acknowledged while messages wait undelivered (or the state cannot be
// read at all) and none is in hand, it asks the consumer's leader to step down, so that another
// replica leads it, and ends the run, which binds again with new pull
// requests. Stalled says, for the process's metrics, how long each
// consumer it runs has been stalled.

// StallBound is how long a consumer may get nothing while messages wait
// before its run acts: past an election (a few seconds), well before an
// agent waiting on an event gives up.
const StallBound = 6 * time.Second

// stallBound is StallBound, shorter in tests.
var stallBound = StallBound

// stallCheck is how often a watch reads its consumer's state.
const stallCheck = time.Second

// ErrStalled ends a run whose consumer stalled.
var ErrStalled = errors.New("consumer stalled")

// stall is what the process knows of one consumer's stall: since when
// nothing moved while messages waited (zero: it flows), and when its run
// last acted on it.
type stall struct {
	mu           sync.Mutex
	since, acted time.Time
	// ackFloor and delivered are where the consumer was at the last read
	// of its state (read: there was one).
	ackFloor, delivered uint64
	read                bool
}

// stalls are the consumers this process runs, by durable name.
var stalls sync.Map // string → *stall

func stallOf(durable string) *stall {
	s, _ := stalls.LoadOrStore(durable, &stall{})
	return s.(*stall)
}

// Stalled reports, for each durable consumer this process runs, how long
// it has been stalled (0 when it flows).
func Stalled() map[string]time.Duration {
	out := map[string]time.Duration{}
	now := time.Now()
	stalls.Range(func(k, v any) bool {
		s := v.(*stall)
		s.mu.Lock()
		defer s.mu.Unlock()
		out[k.(string)] = 0
		if !s.since.IsZero() {
			out[k.(string)] = now.Sub(s.since)
		}
		return true
	})
	return out
}

// Watch is what WatchStall reads of a run: its consumer, and how many
// messages its handlers hold now (a consumer whose handlers work is not
// stalled, however slow they are).
type Watch struct {
	JS       jetstream.JetStream
	Stream   string
	Durable  string
	Consumer jetstream.Consumer
	InHand   func() int
	Log      *slog.Logger
}

// WatchStall watches w's consumer until ctx ends (nil) or it stalls
// (ErrStalled, once it asked the consumer's leader to step down): the run
// then ends, and starts again.
func WatchStall(ctx context.Context, w Watch) error {
	s := stallOf(w.Durable)
	t := time.NewTicker(stallCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, stallCheck)
		info, err := w.Consumer.Info(ictx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		s.mu.Lock()
		// Stalled: its state unreadable, or messages wait undelivered
		// while it delivers and acknowledges nothing, though it may (not
		// paused, not held back by MaxAckPending) and no handler works.
		stuck := err != nil || s.read && info.NumPending > 0 && !info.Paused &&
			info.AckFloor.Stream == s.ackFloor && info.Delivered.Stream == s.delivered &&
			(info.Config.MaxAckPending <= 0 || info.NumAckPending < info.Config.MaxAckPending)
		if err == nil {
			s.ackFloor, s.delivered, s.read = info.AckFloor.Stream, info.Delivered.Stream, true
		}
		if !stuck || w.InHand() > 0 {
			if !s.acted.IsZero() {
				w.Log.Info("consumer flows again", "stalledFor", now.Sub(s.since).Round(time.Millisecond))
			}
			s.since, s.acted = time.Time{}, time.Time{}
			s.mu.Unlock()
			continue
		}
		if s.since.IsZero() {
			s.since = now
		}
		due := now.Sub(s.since) >= stallBound && now.Sub(s.acted) >= stallBound
		if due {
			s.acted = now
		}
		since := s.since
		s.mu.Unlock()
		if !due {
			continue
		}
		what := "its state cannot be read: " + fmt.Sprint(err)
		if err == nil {
			what = fmt.Sprintf("%d messages wait, %d delivered and not acknowledged, nothing acknowledged", info.NumPending, info.NumAckPending)
		}
		w.Log.Warn("consumer stalled: asking its leader to step down and binding again", "for", now.Sub(since).Round(time.Millisecond), "state", what)
		stepDown(ctx, w.JS, w.Stream, w.Durable)
		return fmt.Errorf("%w: %s for %s", ErrStalled, what, now.Sub(since).Round(time.Millisecond))
	}
}

// stepDown asks the leader of stream's consumer durable to step down, so
// that another replica leads it. A consumer of one replica, or one
// without a leader, has nobody to hand over to: the answer is ignored.
func stepDown(ctx context.Context, js jetstream.JetStream, stream, durable string) {
	ctx, cancel := context.WithTimeout(ctx, stallCheck)
	defer cancel()
	_, _ = js.Conn().RequestWithContext(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+durable, nil)
}

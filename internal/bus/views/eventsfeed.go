package views

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/wire"
)

// EventsFeed is a process's one reader of TOOL_EVENTS for those who follow
// the events as they come, with no durable place in the stream: the HTTP
// API's event streams (one a browser) and the metrics exporter. One
// ordered consumer brings each event to the process once; the feed hands
// it to every follower and keeps the last keepEvents of them, so that a
// follower starting a little way back (the web page follows from the
// sequence its list was read at) starts from memory.
//
// A follower the feed cannot serve, because it starts further back than
// the feed keeps or falls more than a buffer behind, follows the stream
// with an ordered consumer of its own from the first event it has not
// had, until that reaches what the feed keeps, and then the feed again:
// either way Follow hands it every event once, in order.
type EventsFeed struct {
	js jetstream.JetStream
	// up is closed when the feed's consumer first exists.
	up     chan struct{}
	upOnce sync.Once

	mu sync.Mutex
	// running: the feed's consumer delivers from next on. Between its
	// lives (after a failure) followers go on with consumers of their own.
	running bool
	next    uint64
	// recent are the last events delivered, oldest first: at least
	// keepEvents of them once there are as many, at most twice that.
	recent    []streamEvent
	followers map[*follower]struct{}
}

// streamEvent is one message of TOOL_EVENTS: its sequence, subject and
// data (a wire.Event).
type streamEvent struct {
	Seq     uint64
	Subject string
	Data    []byte
}

const (
	// keepEvents is how many of the last events the feed keeps for
	// followers starting back: about 1.5 MB of events.
	keepEvents = 1024
	// followerBuffer is how far a follower may fall behind before it
	// reads on its own.
	followerBuffer = 1024
)

// follower is one Follow served by the feed.
type follower struct {
	from uint64 // the first sequence it wants
	c    chan streamEvent
	// dropped is closed when the feed stops serving it: it fell behind,
	// or the feed's consumer failed.
	dropped chan struct{}
}

// NewEventsFeed returns a feed of TOOL_EVENTS; Run runs it, and Follow
// waits for it to run.
func NewEventsFeed(js jetstream.JetStream) *EventsFeed {
	return &EventsFeed{js: js, up: make(chan struct{}), followers: map[*follower]struct{}{}}
}

// LastSeq is the sequence of the last event in TOOL_EVENTS (0: none
// yet), read from the stream, whether or not the feed runs.
func (f *EventsFeed) LastSeq(ctx context.Context) (uint64, error) {
	st, err := f.js.Stream(ctx, wire.EventsStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// Run reads TOOL_EVENTS from its end until ctx ends, and again after a
// failure from where it stopped (consumer.RunRestarting); it returns nil
// when ctx ends.
func (f *EventsFeed) Run(ctx context.Context, log *slog.Logger) error {
	return consumer.RunRestarting(ctx, log, "events feed", f.run)
}

func (f *EventsFeed) run(ctx context.Context) error {
	defer f.stop()
	st, err := f.js.Stream(ctx, wire.EventsStream)
	if err != nil {
		return fmt.Errorf("events feed: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("events feed: %w", err)
	}
	end := info.State.LastSeq + 1
	f.mu.Lock()
	start := f.next
	if start == 0 || start > end {
		// A first life, or the stream is not the one read before.
		start, f.recent = end, nil
	}
	// Followers attach from now on: the consumer below delivers from
	// start, or fails, and stop drops them.
	f.running, f.next = true, start
	f.mu.Unlock()
	up := func() { f.upOnce.Do(func() { close(f.up) }) }
	deliver := func(seq uint64, subject string, data []byte) {
		f.deliver(streamEvent{Seq: seq, Subject: subject, Data: data})
	}
	if err := FollowEvents(ctx, f.js, start, up, deliver); err != nil {
		return fmt.Errorf("events feed: %w", err)
	}
	return nil
}

// deliver hands ev to every follower, and drops those too far behind to
// take it.
func (f *EventsFeed) deliver(ev streamEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = ev.Seq + 1
	f.recent = append(f.recent, ev)
	if len(f.recent) >= 2*keepEvents {
		f.recent = f.recent[:copy(f.recent, f.recent[len(f.recent)-keepEvents:])]
	}
	for fl := range f.followers {
		if ev.Seq < fl.from {
			continue
		}
		select {
		case fl.c <- ev:
		default:
			f.dropLocked(fl)
		}
	}
}

// stop ends a life of the feed's consumer: its followers go on alone.
func (f *EventsFeed) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = false
	for fl := range f.followers {
		f.dropLocked(fl)
	}
}

func (f *EventsFeed) dropLocked(fl *follower) {
	delete(f.followers, fl)
	close(fl.dropped)
}

// attach makes a follower of every event from from on (0: those to come),
// handed at once those the feed keeps; false when the feed does not run
// or no longer keeps the first of them. next is the first sequence it is
// handed.
func (f *EventsFeed) attach(from uint64) (fl *follower, next uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return nil, 0, false
	}
	if from == 0 {
		from = f.next
	}
	backlog, ok := f.backlogLocked(from)
	if !ok {
		return nil, 0, false
	}
	fl = &follower{from: from, c: make(chan streamEvent, followerBuffer), dropped: make(chan struct{})}
	for _, ev := range backlog {
		fl.c <- ev
	}
	f.followers[fl] = struct{}{}
	return fl, from, true
}

// backlogLocked returns the events the feed keeps from from on, and
// whether it can serve a follower from there: it keeps them all, and they
// fill at most half a follower's buffer.
func (f *EventsFeed) backlogLocked(from uint64) ([]streamEvent, bool) {
	oldest := f.next
	if len(f.recent) > 0 {
		oldest = f.recent[0].Seq
	}
	if from < oldest {
		return nil, false // further back than the feed keeps
	}
	i, _ := slices.BinarySearchFunc(f.recent, from, func(ev streamEvent, seq uint64) int { return cmp.Compare(ev.Seq, seq) })
	backlog := f.recent[i:]
	return backlog, len(backlog) <= followerBuffer/2
}

// serves reports whether a follower from from would be served by the feed.
func (f *EventsFeed) serves(from uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.backlogLocked(from)
	return ok && f.running
}

func (f *EventsFeed) detach(fl *follower) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.followers[fl]; ok {
		f.dropLocked(fl)
	}
}

// Follow calls fn with every event of TOOL_EVENTS from sequence from on
// (0: those published from now on), in order and once each, until ctx
// ends; started is called once every event to come will reach fn. It
// waits for the feed to run first, then follows the feed, or the stream
// with a consumer of its own while the feed cannot serve it (see
// EventsFeed). fn is called from one goroutine at a time; the feed does
// not wait for it.
func (f *EventsFeed) Follow(ctx context.Context, from uint64, started func(), fn func(seq uint64, subject string, data []byte)) error {
	select {
	case <-f.up:
	case <-ctx.Done():
		return nil
	}
	for {
		if fl, next, ok := f.attach(from); ok {
			started()
			started = func() {}
			from = f.follow(ctx, fl, next, fn)
			if ctx.Err() != nil {
				return nil
			}
		}
		var err error
		if from, err = f.catchUp(ctx, from, started, fn); err != nil || ctx.Err() != nil {
			return err
		}
		started = func() {}
	}
}

// catchUp hands fn the events from from on (0: those to come) with an
// ordered consumer of its own, until the feed can serve the next one or
// ctx ends, and returns the first sequence fn has not had.
func (f *EventsFeed) catchUp(ctx context.Context, from uint64, started func(), fn func(seq uint64, subject string, data []byte)) (uint64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Uint64
	next.Store(from)
	var caught atomic.Bool
	err := FollowEvents(ctx, f.js, from, started, func(seq uint64, subject string, data []byte) {
		if caught.Load() {
			return // the feed hands it
		}
		fn(seq, subject, data)
		next.Store(seq + 1)
		if f.serves(seq + 1) {
			caught.Store(true)
			cancel()
		}
	})
	return next.Load(), err
}

// follow hands fn what the feed gives fl until ctx ends or the feed drops
// it, and returns the first sequence fn has not had.
func (f *EventsFeed) follow(ctx context.Context, fl *follower, next uint64, fn func(seq uint64, subject string, data []byte)) uint64 {
	defer f.detach(fl)
	handle := func(ev streamEvent) {
		fn(ev.Seq, ev.Subject, ev.Data)
		next = ev.Seq + 1
	}
	for {
		select {
		case ev := <-fl.c:
			handle(ev)
		case <-fl.dropped:
			// What it was handed before is still to be read.
			for {
				select {
				case ev := <-fl.c:
					handle(ev)
				default:
					return next
				}
			}
		case <-ctx.Done():
			return next
		}
	}
}

// FollowEvents is Follow without a feed: an ordered consumer of its own
// from sequence from (0: the events to come).
func FollowEvents(ctx context.Context, js jetstream.JetStream, from uint64, started func(), fn func(seq uint64, subject string, data []byte)) error {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	if from > 0 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	}
	// An ordered consumer is ephemeral, unacknowledged and strictly in
	// order; the client recreates it after a gap (a reconnect, a lost
	// heartbeat) from the last sequence it delivered, so no event is
	// handed twice or skipped.
	cons, err := js.OrderedConsumer(ctx, wire.EventsStream, cfg)
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", wire.EventsStream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if meta, err := m.Metadata(); err == nil {
			fn(meta.Sequence.Stream, m.Subject(), m.Data())
		}
	})
	if err != nil {
		return fmt.Errorf("consume %s: %w", wire.EventsStream, err)
	}
	started()
	<-ctx.Done()
	cc.Stop()
	// fn does not run after Follow returns: wait for the one in flight.
	<-cc.Closed()
	// The server would keep the consumer until it has seen nobody pull
	// for its inactive threshold (five minutes): remove it now, unless the
	// connection is down (a process stopping would wait for nothing).
	if js.Conn().IsConnected() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, wire.EventsStream, cons.CachedInfo().Name)
	}
	return nil
}

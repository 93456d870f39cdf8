package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
)

// Timer owns every deadline of the tool_calls bucket: approval timeouts,
// reminders and escalations, the leases of calls on their last attempt
// and the end of a finished call's retention. It learns them from a watch of the
// bucket (every entry at start, then every revision, heartbeats'
// included). It keeps the open calls' deadlines in a heap in memory; when
// one falls due it reads the entry again and acts on what the entry is
// now, never on the revision that announced it. It keeps the finished
// calls apart, in a queue in the order they finished (retirements), each
// retired (WithRetention) once its window has passed: so a finished call
// costs it 24 bytes and no place in the heap.
//
// Any number of Timers may run against one bucket. Each acts on every
// deadline; compare-and-set makes a second firing a refused transition,
// so each deadline changes a call once.
//
// A Timer tells the time by time.Now, or by the clock WithClock gives it.
type Timer struct {
	conn        *bus.Conn
	buckets     *bus.Buckets
	store       *bus.KVStore
	m           Deadlines
	log         *slog.Logger
	concurrency int
	retry       time.Duration
	retain      time.Duration
	retirer     Retirer
	now         func() time.Time
	clockTick   time.Duration    // 0: sleep until the next deadline; else at most this long
	feed        *views.CallsFeed // the process's, run by it; nil: the timer's own
	updates     chan observation
	stopped     chan struct{} // closed when Run ends
	loaded      chan struct{} // closed once the bucket is first read
	loadedOnce  sync.Once
}

// TimerOption configures a Timer.
type TimerOption func(*Timer)

// WithConcurrency bounds how many deadlines are acted on, and finished
// calls retired, at once (default 64; the open calls' deadlines go
// first). Each action is a few round trips to JetStream, so a burst of
// deadlines or retirements (a restart after an outage) drains at about
// this many times the round-trip rate.
func WithConcurrency(n int) TimerOption {
	return func(t *Timer) {
		if n > 0 {
			t.concurrency = n
		}
	}
}

// WithFeed has the timer learn its deadlines from f, the process's one
// watch of the bucket, which the process runs, rather than from a watch
// of its own. The timer joins f when it is built, and must then Run:
// until it does, f waits for it.
func WithFeed(f *views.CallsFeed) TimerOption {
	return func(t *Timer) { t.feed = f }
}

// Retirer moves a call finished more than after ago from tool_calls to
// the archive: gate.Timer has it. It refuses, with a conflict, a call
// not finished that long.
type Retirer interface {
	Retire(ctx context.Context, pendingID string, after time.Duration) error
}

// WithRetention has the timer retire each finished call after it, through
// r (default: never; a finished call stays in tool_calls).
func WithRetention(after time.Duration, r Retirer) TimerOption {
	return func(t *Timer) {
		if after > 0 && r != nil {
			t.retain, t.retirer = after, r
		}
	}
}

// WithRetryDelay sets how long the timer waits before acting again on a
// deadline whose action failed (JetStream unreachable, say), or a
// retirement that failed (default 1s).
func WithRetryDelay(d time.Duration) TimerOption {
	return func(t *Timer) {
		if d > 0 {
			t.retry = d
		}
	}
}

// WithClock has the timer tell the time by now rather than time.Now: a
// deadline falls due, and a retry or retirement is scheduled, on now's
// time. Such a clock (a test's) may jump ahead, so the timer reads it
// again at least every 10ms rather than sleeping until the next
// deadline. The machine the deadlines go through (Deadlines) must tell
// the same time, for it checks a deadline itself.
func WithClock(now func() time.Time) TimerOption {
	return func(t *Timer) {
		if now != nil {
			t.now, t.clockTick = now, clockTick
		}
	}
}

// clockTick is the longest a timer given a clock by WithClock sleeps.
const clockTick = 10 * time.Millisecond

// Deadlines are the commands a Timer gives when a deadline falls due:
// gate.Timer has them (and *machine.Machine, for tests of the timer
// alone).
type Deadlines interface {
	Expire(ctx context.Context, pendingID string) (*machine.Entry, error)
	Remind(ctx context.Context, pendingID string) (*machine.Entry, error)
	Escalate(ctx context.Context, pendingID string) (*machine.Entry, error)
	AbandonLease(ctx context.Context, pendingID string) (*machine.Entry, error)
}

// NewTimer returns a Timer over b's tool_calls bucket, read over conn,
// moving entries through m. Run starts it.
func NewTimer(conn *bus.Conn, b *bus.Buckets, m Deadlines, log *slog.Logger, opts ...TimerOption) *Timer {
	t := &Timer{conn: conn, buckets: b, store: bus.NewKVStore(conn.JetStream(), b.Calls), m: m, log: log, concurrency: 64, retry: time.Second, now: time.Now,
		updates: make(chan observation, 256), stopped: make(chan struct{}), loaded: make(chan struct{})}
	for _, o := range opts {
		o(t)
	}
	if t.feed != nil {
		t.feed.Add(t.view())
	}
	return t
}

// observation is what one revision of an entry makes due, or, restart,
// the start of a new life of the feed: the bucket is read again from the
// start. It holds no entry: the feed's view computes it as it reads.
type observation struct {
	id  string
	rev uint64
	// kind and at: what falls due next for an open call (deadlineOf).
	kind kind
	at   int64
	// finished: the call has finished, at since (its retention's start).
	finished bool
	since    int64
	restart  bool
}

// observationOf is what revision rev of e makes due.
func observationOf(e *machine.Entry, rev uint64) observation {
	o := observation{id: e.PendingID, rev: rev, finished: e.Status.Terminal()}
	o.kind, o.at = deadlineOf(e)
	if t := e.LastTransition; t != nil {
		o.since = t.At
	}
	return o
}

// Run acts on deadlines until ctx ends, then waits for the actions in
// flight and returns nil. It learns them from a watch of the bucket:
// every entry as it is, then every revision written (the process's
// shared one, WithFeed, or one of its own), which is read again from the
// start after a failure. A Timer runs once.
func (t *Timer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if t.feed == nil {
		own := views.NewCallsFeed(t.conn.JetStream(), t.buckets.Calls)
		own.Add(t.view())
		wg.Go(func() { _ = own.Run(ctx, t.log) })
	}
	t.schedule(ctx, newDeadlines(), newRetirements(t.retain), t.updates)
	close(t.stopped)
	cancel()
	wg.Wait()
	return nil
}

// Loaded is closed once the timer has read the bucket a first time: from
// then on it knows every deadline (those it has been handed, at least:
// the scheduler takes them in as it can).
func (t *Timer) Loaded() <-chan struct{} { return t.loaded }

// view hands the scheduler every revision the feed reads, until Run
// ends. A revision no newer than the one it knows changes nothing to the
// deadlines (a feed reading the bucket again after a failure repeats
// what it knows); a key deleted meanwhile leaves a deadline that, due,
// finds no entry. The retirements start afresh at each life of the
// feed, which queues again those of the finished calls it reads.
func (t *Timer) view() views.CallsView {
	return views.CallsView{Start: func() (func(views.CallRevision), func()) {
		n, start := 0, time.Now()
		select {
		case t.updates <- observation{restart: true}:
		case <-t.stopped:
		}
		var scratch machine.Entry // what the revision read holds: observationOf keeps none of it
		apply := func(r views.CallRevision) {
			var o observation
			switch {
			case r.Removed:
				o = observation{id: r.Key, rev: r.Revision} // retired: nothing is due
			case r.Head == nil:
				// Nothing later can make it readable; the entry's next
				// revision tells the timer what is due.
				t.log.Error("timer: undecodable entry", "key", r.Key, "revision", r.Revision, "err", r.Err)
				return
			default:
				r.Head.Fill(&scratch)
				o = observationOf(&scratch, r.Revision)
				n++
			}
			select {
			case t.updates <- o:
			case <-t.stopped:
			}
		}
		loaded := func() {
			t.log.Info("timer started", "entries", n, "load", time.Since(start).Round(time.Millisecond))
			t.loadedOnce.Do(func() { close(t.loaded) })
		}
		return apply, loaded
	}}
}

// schedule is the one goroutine that owns the deadlines and the
// retirements: it takes in what the events say, starts the actions that
// are due, at most concurrency at once (the open calls' deadlines
// first, then retirements), and takes in what they found.
func (t *Timer) schedule(ctx context.Context, dl *deadlines, rt *retirements, updates <-chan observation) {
	// Room for every action in flight, so none blocks on its way out
	// after the loop has stopped listening.
	outcomes := make(chan outcome, t.concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	busy := 0
	for {
		for busy < t.concurrency {
			now := t.now().UnixMilli()
			if j, ok := dl.popDue(now); ok {
				busy++
				wg.Go(func() { outcomes <- t.act(ctx, j) })
			} else if r, ok := rt.popDue(now); ok {
				busy++
				life := rt.life
				wg.Go(func() { outcomes <- t.retire(ctx, r, life) })
			} else {
				break
			}
		}
		var wakeC <-chan time.Time
		at, ok := dl.next()
		if rat, rok := rt.next(); rok && (!ok || rat < at) {
			at, ok = rat, true
		}
		if ok && busy < t.concurrency {
			sleep := time.UnixMilli(at).Sub(t.now())
			if t.clockTick > 0 {
				sleep = min(sleep, t.clockTick)
			}
			wake.Reset(sleep)
			wakeC = wake.C
		}
		select {
		case <-ctx.Done():
			return
		case o := <-updates:
			observe(dl, rt, o)
		case o := <-outcomes:
			busy--
			if o.retirement {
				rt.done(o)
			} else {
				dl.done(o)
			}
		case <-wakeC:
		}
	}
}

// observe takes in o: what falls due for an open call, the retirement of
// a finished one.
func observe(dl *deadlines, rt *retirements, o observation) {
	if o.restart {
		rt.restart()
		return
	}
	dl.set(o.id, o.rev, o.kind, o.at)
	if o.finished {
		rt.queueAt(o.id, o.since)
	}
}

// act handles one deadline that fell due.
func (t *Timer) act(ctx context.Context, j job) outcome {
	log := t.log.With("pendingId", j.id, "deadline", j.kind.String())
	if j.kind == kindApproval {
		// Expire reads the entry and checks the deadline itself, inside
		// the compare-and-set: reading it here first would only add a
		// round trip.
		return t.expire(ctx, log, j)
	}
	e, rev, err := t.store.Get(ctx, j.id)
	if errors.Is(err, machine.ErrNotFound) {
		return outcome{id: j.id, gone: true}
	} else if err != nil {
		return t.retryLater(ctx, log, j, err)
	}
	k, at := deadlineOf(e)
	now := t.now().UnixMilli()
	switch {
	case k == kindNone:
		return outcome{id: j.id, rev: rev}
	case at > now:
		// Not due after all: a heartbeat renewed the lease (heartbeats
		// publish no event), or the entry moved on to a later deadline.
		return outcome{id: j.id, rev: rev, kind: k, at: at}
	case k == kindApproval:
		return t.expire(ctx, log, job{id: j.id, kind: k, at: at, rev: rev})
	case k == kindReminder:
		return t.remind(ctx, log, job{id: j.id, kind: k, at: at, rev: rev})
	case k == kindEscalation:
		return t.escalate(ctx, log, job{id: j.id, kind: k, at: at, rev: rev})
	default:
		return t.leaseExpired(ctx, log, j, e, rev)
	}
}

func (t *Timer) expire(ctx context.Context, log *slog.Logger, j job) outcome {
	e, err := t.m.Expire(ctx, j.id)
	switch {
	case err == nil:
		log.Debug("timer: approval deadline passed", "status", e.Status)
		return outcome{id: j.id}
	case errors.Is(err, machine.ErrNotFound):
		return outcome{id: j.id, gone: true}
	case errors.Is(err, machine.ErrConflict):
		// Someone decided first, or another timer fired first.
		log.Debug("timer: nothing to expire", "err", err)
		return outcome{id: j.id}
	default:
		return t.retryLater(ctx, log, j, err)
	}
}

// remind reminds the approvers of a call still pending. Like Expire,
// Remind checks inside its compare-and-set that the call is pending and
// not reminded yet, so two timers remind once; the revision it writes
// brings the approval deadline back to the timer.
func (t *Timer) remind(ctx context.Context, log *slog.Logger, j job) outcome {
	_, err := t.m.Remind(ctx, j.id)
	switch {
	case err == nil:
		log.Debug("timer: approvers reminded")
		return outcome{id: j.id}
	case errors.Is(err, machine.ErrNotFound):
		return outcome{id: j.id, gone: true}
	case errors.Is(err, machine.ErrConflict):
		log.Debug("timer: nothing to remind", "err", err)
		return outcome{id: j.id}
	default:
		return t.retryLater(ctx, log, j, err)
	}
}

// escalate moves a call still pending to its next escalation tier; like
// Remind, Escalate checks inside its compare-and-set that the tier is due
// and not reached yet, so two timers escalate once.
func (t *Timer) escalate(ctx context.Context, log *slog.Logger, j job) outcome {
	_, err := t.m.Escalate(ctx, j.id)
	switch {
	case err == nil:
		log.Debug("timer: escalated")
		return outcome{id: j.id}
	case errors.Is(err, machine.ErrNotFound):
		return outcome{id: j.id, gone: true}
	case errors.Is(err, machine.ErrConflict):
		log.Debug("timer: nothing to escalate", "err", err)
		return outcome{id: j.id}
	default:
		return t.retryLater(ctx, log, j, err)
	}
}

// retire moves a call finished a retention window ago to the archive,
// r being its retirement, queued in the feed's life. Retire reads the
// entry again and archives it before it leaves, so two timers archive it
// once (a second archiving is a duplicate the archive drops) and one that
// dies between the two leaves it to the next. A call retired already
// (by another timer), or whose key was deleted, is not found; one that
// has moved on since (a new call at its key) is a conflict: both are
// done with. Any other failure is tried again after the retry delay.
func (t *Timer) retire(ctx context.Context, r retirement, life uint64) outcome {
	o := outcome{id: r.id, retirement: true, life: life}
	err := t.retirer.Retire(ctx, r.id, t.retain)
	switch {
	case err == nil:
		t.log.Debug("timer: retired to the archive", "pendingId", r.id)
	case errors.Is(err, machine.ErrNotFound):
	case errors.Is(err, machine.ErrConflict):
		t.log.Debug("timer: nothing to retire", "pendingId", r.id, "err", err)
	default:
		if ctx.Err() == nil {
			t.log.Warn("timer: retirement failed, will retry", "pendingId", r.id, "deadline", "retention", "in", t.retry, "err", err)
		}
		o.at = t.now().Add(t.retry).UnixMilli()
	}
	return o
}

// leaseExpired fails a call whose executor's lease ran out on its last
// attempt.
func (t *Timer) leaseExpired(ctx context.Context, log *slog.Logger, j job, e *machine.Entry, rev uint64) outcome {
	_, err := t.m.AbandonLease(ctx, j.id)
	var terr *machine.TransitionError
	switch {
	case err == nil:
		log.Info("timer: lease expired on the last attempt, call failed", "holder", e.Lease.Holder, "attempts", e.ExecutionAttempts)
		return outcome{id: j.id, rev: rev}
	case errors.As(err, &terr):
		// It finished, or a heartbeat renewed the lease just now: the
		// entry as it is now says which, and a renewal has no event.
		k, at := deadlineOf(terr.Entry)
		return outcome{id: j.id, rev: rev, kind: k, at: at}
	case errors.Is(err, machine.ErrNotFound):
		return outcome{id: j.id, gone: true}
	default:
		return t.retryLater(ctx, log, job{id: j.id, kind: kindLease, at: e.Lease.ExpiresAt, rev: rev}, err)
	}
}

// retryLater keeps the deadline j, due again after the retry delay.
func (t *Timer) retryLater(ctx context.Context, log *slog.Logger, j job, err error) outcome {
	if ctx.Err() == nil {
		log.Warn("timer: action failed, will retry", "in", t.retry, "err", err)
	}
	return outcome{id: j.id, rev: j.rev, kind: j.kind, at: t.now().Add(t.retry).UnixMilli()}
}

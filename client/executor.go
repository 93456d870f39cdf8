package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Call is a tool call handed to a Handler: claimed, so no other executor
// runs it while this one holds its lease.
type Call struct {
	PendingID string
	// ToolCallID is the agent's id for the call: use it as the idempotency
	// key of whatever the tool changes, since a call whose executor died
	// runs again elsewhere.
	ToolCallID     string
	ToolName       string
	Arguments      json.RawMessage // approved, possibly edited by the approver
	ConversationID string
	CallerBotID    string
	Attempt        int // 1 for the first run
	Entry          *machine.Entry
	// Queued is when toolgate queued the work item this run came from:
	// its stream's timestamp, by the NATS server's clock (zero if the
	// server gave none).
	Queued time.Time
}

// Result is what a Handler returns: Output must be JSON.
type Result struct {
	Output json.RawMessage
	Cost   float64
}

// Handler runs one tool. An error fails the attempt; the call is tried
// again, with backoff, until its policy's maxExecutionAttempts, unless the
// error is Permanent. A Result returned with an error is recorded too.
type Handler func(ctx context.Context, call Call) (Result, error)

type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

// Permanent marks a handler's error that trying again cannot fix: the call
// fails at once.
func Permanent(err error) error { return permanentError{err} }

// ExecutorOptions tune an Executor.
type ExecutorOptions struct {
	// ID names this executor as the holder of the leases it takes
	// (default host-pid-random).
	ID string
	// Lease is how long a claim lasts without a heartbeat (default 30s);
	// heartbeats renew it every third of that. It is also how long (30s at
	// least) a report toolgate does not answer is sent again, so it should
	// outlast a leader election (seconds) with room to spare.
	Lease time.Duration
	// Backoff is the wait before each retry; the last repeats (default
	// 1s, 2s, 4s).
	Backoff []time.Duration
	// Concurrency is how many calls of one tool run at once (default
	// DefaultConcurrency: four per CPU, handlers mostly waiting on I/O).
	Concurrency int
	Log         *slog.Logger
}

// DefaultConcurrency is how many calls of one tool an Executor runs at
// once when not told: four per CPU this process may use, and at least 8.
func DefaultConcurrency() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// Executor hosts tool handlers: it consumes the toolgate.work.<tool> queues of
// the tools it has, claims each call by compare-and-set before running it,
// heartbeats from the claim until the result is recorded, and records it,
// sending a report toolgate does not answer again for as long as the lease
// lasts (30s at least). A call that is not approved or due, or already rejected,
// cancelled, finished or claimed by a live executor, cannot be claimed, so
// it is never run; a claimed one runs again elsewhere only when its
// executor dies (or is cut off from toolgate for longer than a lease)
// before recording it.
type Executor struct {
	c        *Client
	opts     ExecutorOptions
	handlers map[string]Handler

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // by pendingId
	// busy holds the calls this executor has in hand, from its claim
	// until their outcome is recorded or given up.
	busy map[string]bool
}

// errConversationCancelled is why a handler's context ends when its
// conversation is cancelled.
var errConversationCancelled = errors.New("conversation cancelled")

// NewExecutor returns an executor; add handlers with Handle, then Run.
func (c *Client) NewExecutor(opts ExecutorOptions) (*Executor, error) {
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[:6])
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if len(opts.Backoff) == 0 {
		opts.Backoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	opts.Log = opts.Log.With("executor", opts.ID)
	return &Executor{
		c: c, opts: opts,
		handlers: map[string]Handler{}, running: map[string]context.CancelCauseFunc{}, busy: map[string]bool{},
	}, nil
}

// Handle hosts tool with h. Call it before Run.
func (x *Executor) Handle(tool string, h Handler) { x.handlers[tool] = h }

// Run consumes the hosted tools' queues until ctx ends, then waits for the
// handlers running, and records what those that succeeded returned. A call
// whose handler ended otherwise keeps its lease until it runs out; then the
// timer queues it again for another executor.
func (x *Executor) Run(ctx context.Context) error {
	if len(x.handlers) == 0 {
		return errors.New("executor: no tools to host")
	}
	sub, err := x.c.nc.Subscribe(wire.CancelSubject, x.onCancel)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	js := x.c.js
	g, ctx := errgroup.WithContext(ctx)
	for tool, h := range x.handlers {
		r := consumer.NewRunner(js, consumer.ConsumerConfig{
			Stream:         wire.WorkStream,
			Durable:        wire.ExecutorDurable(tool),
			FilterSubjects: []string{wire.WorkSubject(tool)},
			AckWait:        x.opts.Lease,
			Concurrency:    x.opts.Concurrency,
			Backoff:        []time.Duration{time.Second},
			Bind:           func(ctx context.Context) (jetstream.Consumer, error) { return x.workConsumer(ctx, tool) },
		}, x.opts.Log, func(ctx context.Context, msg jetstream.Msg) error {
			return x.work(ctx, msg, h)
		})
		g.Go(func() error { return r.Run(ctx) })
	}
	return g.Wait()
}

// workConsumer asks toolgate for the consumer of tool's queue, which
// toolgate configures, and binds it through the JetStream API prefix
// toolgate names: a client credential reaches only that consumer's
// lookups, fetches and acknowledgements.
func (x *Executor) workConsumer(ctx context.Context, tool string) (jetstream.Consumer, error) {
	var reply wire.WorkConsumerReply
	req := wire.WorkConsumerRequest{Tool: tool, AckWaitMs: x.opts.Lease.Milliseconds()}
	if err := x.c.request(ctx, wire.EndpointWorkConsumer, req, &reply); err != nil {
		return nil, err
	}
	js, err := jetstream.NewWithAPIPrefix(x.c.nc, reply.APIPrefix)
	if err != nil {
		return nil, err
	}
	return js.Consumer(ctx, reply.Stream, reply.Consumer)
}

// onCancel stops the handlers of a cancelled conversation's running calls.
func (x *Executor) onCancel(msg *nats.Msg) {
	var reply wire.CancelConversationReply
	if json.Unmarshal(msg.Data, &reply) != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range reply.Running {
		if cancel, ok := x.running[e.PendingID]; ok {
			cancel(errConversationCancelled)
		}
	}
}

// work handles one work item: claim, run, record.
func (x *Executor) work(ctx context.Context, msg jetstream.Msg, h Handler) error {
	var item wire.WorkItem
	if err := json.Unmarshal(msg.Data(), &item); err != nil {
		return consumer.Permanent(fmt.Errorf("work item: %w", err))
	}
	// A call this executor is running already is not claimed again, not
	// even when its lease ran out under load (heartbeats that could not
	// get through) and the timer queued it again: a second claim would
	// run it twice. The item comes back after a lease, by when the run in
	// hand has ended (and the item is spent) or this executor has died
	// (and whoever gets it reclaims the call).
	x.mu.Lock()
	if x.busy[item.PendingID] {
		x.mu.Unlock()
		return consumer.RetryAfter(fmt.Errorf("%s: running here already", item.PendingID), x.opts.Lease)
	}
	x.busy[item.PendingID] = true
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.busy, item.PendingID)
		x.mu.Unlock()
	}()
	// A claim whose answer was lost (the server it went through died) may
	// have been granted: asked again, it is refused, since a live lease is
	// never claimed twice. The refusal's entry then shows this executor
	// holding the lease, and the call is ours to run.
	e, claimed, err := x.ask(ctx, wire.EndpointStarted, wire.ReportRequest{PendingID: item.PendingID, By: x.opts.ID, LeaseMs: x.opts.Lease.Milliseconds(), Revision: item.Revision},
		nil, func(e *machine.Entry) bool { return e.Status == machine.StateExecuting && x.holds(e) })
	if errors.Is(err, machine.ErrConflict) || errors.Is(err, machine.ErrNotFound) {
		// Not runnable (refused, cancelled, done, not due) or held by a
		// live executor: not ours to run. The item is spent.
		x.opts.Log.Debug("not claimed", "pendingId", item.PendingID, "err", err)
		return nil
	} else if err != nil {
		return err // the bus: try the item again
	}
	var queued time.Time
	if md, err := msg.Metadata(); err == nil {
		queued = md.Timestamp
	}
	x.run(ctx, e, claimed, queued, h)
	return nil
}

// holds reports whether e's lease is this executor's.
func (x *Executor) holds(e *machine.Entry) bool { return e.Lease != nil && x.is(e.Lease.Holder) }

// is reports whether a lease holder or a transition's actor is this
// executor: its ID, or its ID under its credential's name, as toolgate
// records the holder of a credential that is not toolgate's own
// ("exec/worker-2" for the ID "worker-2").
func (x *Executor) is(name string) bool {
	return name == x.opts.ID || strings.HasSuffix(name, "/"+x.opts.ID)
}

// run runs a claimed call until it succeeds, fails for good, or this
// executor stops or loses the lease. The lease is renewed from the claim
// (made at claimed) until the outcome is recorded, retries and their
// backoff included. queued is when its work item was.
func (x *Executor) run(ctx context.Context, e *machine.Entry, claimed, queued time.Time, h Handler) {
	id := e.PendingID
	log := x.opts.Log.With("pendingId", id, "tool", e.ToolName)
	lease := x.keepLease(context.WithoutCancel(ctx), id, claimed)
	defer lease.stop()
	for {
		res, err, cause := x.attempt(ctx, e, queued, h, lease)
		rec := wire.EndpointFailed
		outcome := wire.ReportRequest{PendingID: id, By: x.opts.ID, Result: res.Output, Cost: res.Cost}
		switch {
		case err == nil:
			// Done, even if this executor is stopping or its lease ran out
			// meanwhile: recorded, it does not run again elsewhere. (Had
			// another executor reclaimed the call, the record is refused.)
			rec = wire.EndpointSucceeded
		case errors.Is(cause, errLeaseLost), ctx.Err() != nil:
			// Another executor may hold the call now, or this one is
			// stopping: leave it to the lease.
			log.Info("stopped running", "cause", cause)
			return
		case errors.Is(cause, errConversationCancelled):
			outcome.Error = "cancelled: " + err.Error()
		case errors.As(err, new(permanentError)) || e.AttemptsLeft() == 0:
			outcome.Error = err.Error()
		default:
			log.Warn("attempt failed, retrying", "attempt", e.ExecutionAttempts, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(x.opts.Backoff[min(e.ExecutionAttempts, len(x.opts.Backoff))-1]):
			}
			failed := e.ExecutionAttempts
			next, sent, err := x.ask(ctx, wire.EndpointRetry, wire.ReportRequest{PendingID: id, By: x.opts.ID, Attempt: failed, LeaseMs: x.opts.Lease.Milliseconds()},
				lease, func(e *machine.Entry) bool {
					return e.Status == machine.StateExecuting && x.holds(e) && e.ExecutionAttempts == failed+1
				})
			if err != nil {
				log.Info("could not claim again", "err", err)
				return
			}
			lease.renewed(sent)
			e = next
			continue
		}
		if len(outcome.Result) > 0 && !json.Valid(outcome.Result) {
			rec, outcome.Result, outcome.Error = wire.EndpointFailed, nil, "handler returned output that is not JSON"
		}
		x.record(context.WithoutCancel(ctx), log, lease, rec, outcome)
		return
	}
}

// record reports a finished run, trying again while toolgate does not
// answer (a leader election takes seconds) for as long as the lease,
// renewed meanwhile if the report is slow to land, lasts (30s at least):
// given up sooner, the lease runs out, the timer queues the call again
// and the tool runs twice.
func (x *Executor) record(ctx context.Context, log *slog.Logger, lease *leaseKeeper, endpoint string, r wire.ReportRequest) {
	want := machine.StateCompletedSuccess
	if endpoint == wire.EndpointFailed {
		want = machine.StateCompletedFailure
	}
	_, _, err := x.ask(ctx, endpoint, r, lease, func(e *machine.Entry) bool {
		return e.Status == want && e.LastTransition != nil && x.is(e.LastTransition.Actor)
	})
	var refused *wire.APIError
	switch {
	case err == nil:
	case errors.As(err, &refused):
		// Not ours to record any more (the lease was lost, the call
		// cancelled): nothing a retry changes.
		log.Warn("outcome refused", "err", err)
	default:
		log.Error("recording the outcome failed; the lease runs out and the call may run again", "err", err)
	}
}

// reportAttemptTimeout bounds the first attempt of an executor's report
// (claim, heartbeat, retry, outcome): a report lost with the server it
// went through is sent again after it, well within a leader election,
// instead of being waited for until the lease has run out. Each attempt
// that gets no answer doubles the next one's, up to reportAttemptMax: an
// answer that is only slow (a loaded toolgate) is then waited for rather
// than asked for again and again.
const (
	reportAttemptTimeout = 2 * time.Second
	reportAttemptMax     = 8 * time.Second
)

// reportPatience is how long a report is sent again at least, however
// short the lease: giving up is a second run once the lease runs out, and
// trying on past the lease costs nothing but time (a report that lands
// after it is refused only if another executor has reclaimed the call).
const reportPatience = 30 * time.Second

// ask sends an executor's report, each attempt bounded, again and again
// while toolgate does not answer it or fails (5xx), and returns the entry
// and when the attempt that got it was sent. A refusal ends it, except
// one whose entry shows, by landed, that an earlier attempt whose answer
// never came did what this one asks: then that entry is the answer, sent
// when the first attempt was. It gives up reportPatience after it began,
// or, with the lease on the call (nil for a claim), when lease.giveUpAt
// says; and it holds the lease's heartbeats back while its first attempt
// is in flight: a report that is answered makes them useless, and on a
// loaded toolgate each would be one more write on the call's key.
func (x *Executor) ask(ctx context.Context, endpoint string, r wire.ReportRequest, lease *leaseKeeper, landed func(*machine.Entry) bool) (*machine.Entry, time.Time, error) {
	first := time.Now()
	until := func() time.Time { return first.Add(max(x.opts.Lease, reportPatience)) }
	if lease != nil {
		until = lease.giveUpAt(first)
		lease.quiet.Store(true)
		defer lease.quiet.Store(false)
	}
	unanswered := false
	timeout := reportAttemptTimeout
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, timeout)
		e, err := x.c.report(actx, endpoint, r)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if timedOut {
			timeout = min(2*timeout, reportAttemptMax)
		}
		var refused *wire.APIError
		switch {
		case err == nil:
			return e, sent, nil
		case errors.As(err, &refused) && refused.Status < 500:
			if unanswered && refused.Entry != nil && landed(refused.Entry) {
				x.opts.Log.Info("an earlier attempt got through", "endpoint", endpoint, "pendingId", r.PendingID)
				return refused.Entry, first, nil
			}
			return nil, sent, err
		case ctx.Err() != nil:
			return nil, sent, err
		case time.Now().Add(wait).After(until()):
			return nil, sent, fmt.Errorf("%w (tried since %s)", err, first.Format(time.TimeOnly))
		}
		// No answer, or toolgate failed to write: either may have written.
		unanswered = true
		if lease != nil {
			lease.quiet.Store(false)
		}
		x.opts.Log.Warn("no answer from toolgate, asking again", "endpoint", endpoint, "pendingId", r.PendingID, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil, sent, err
		case <-time.After(wait):
		}
		// Look before asking again: a claim asked again after its lease
		// ran out would be granted anew, as another attempt.
		rctx, cancel := context.WithTimeout(ctx, timeout)
		e, _, rerr := x.c.read(rctx, r.PendingID)
		cancel()
		if rerr == nil && landed(e) {
			x.opts.Log.Info("an earlier attempt got through", "endpoint", endpoint, "pendingId", r.PendingID)
			return e, first, nil
		}
	}
}

var errLeaseLost = errors.New("lease lost")

// leaseKeeper renews an executor's lease on one call, from the claim until
// the outcome is recorded, and knows how far the renewals toolgate
// answered carry it: a renewal's expiry counts from when it was sent.
type leaseKeeper struct {
	lease time.Duration
	// quiet holds renewals back (a report that renews or ends the lease
	// is in flight).
	quiet atomic.Bool
	mu    sync.Mutex
	until time.Time
	// lost ends when toolgate refuses a renewal.
	lost context.Context
	lose context.CancelFunc
	stop func()
}

// keepLease starts renewing the lease on pendingID, claimed at claimed,
// every third of the lease until stop; after a renewal that got no
// answer, again within a second.
func (x *Executor) keepLease(ctx context.Context, pendingID string, claimed time.Time) *leaseKeeper {
	k := &leaseKeeper{lease: x.opts.Lease, until: claimed.Add(x.opts.Lease)}
	k.lost, k.lose = context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	k.stop = func() { cancel(); wg.Wait(); k.lose() }
	every := x.opts.Lease / 3
	wg.Go(func() {
		t := time.NewTimer(every)
		defer t.Stop()
		timeout := reportAttemptTimeout
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if k.quiet.Load() {
				t.Reset(every)
				continue
			}
			sent := time.Now()
			actx, acancel := context.WithTimeout(ctx, timeout)
			_, err := x.c.report(actx, wire.EndpointHeartbeat, wire.ReportRequest{PendingID: pendingID, By: x.opts.ID, LeaseMs: x.opts.Lease.Milliseconds()})
			if actx.Err() != nil && ctx.Err() == nil {
				timeout = min(2*timeout, reportAttemptMax)
			}
			acancel()
			switch {
			case err == nil:
				k.renewed(sent)
				timeout = reportAttemptTimeout
				t.Reset(every)
			case errors.Is(err, machine.ErrConflict) || errors.Is(err, machine.ErrNotFound):
				// Run out, reclaimed, or finished (an outcome recorded
				// whose answer was lost): nothing left to renew.
				k.lose()
				return
			default:
				if ctx.Err() != nil {
					return
				}
				t.Reset(min(every, time.Second))
			}
		}
	})
	return k
}

// renewed notes a renewal (a heartbeat, a retry's claim) sent at sent.
func (k *leaseKeeper) renewed(sent time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if until := sent.Add(k.lease); until.After(k.until) {
		k.until = until
	}
}

// giveUpAt returns, for a report begun at begun, when to stop sending it
// again: a lease (reportPatience at least) after it began, or later if
// renewals toolgate answered since carry the lease further.
func (k *leaseKeeper) giveUpAt(begun time.Time) func() time.Time {
	return func() time.Time {
		k.mu.Lock()
		defer k.mu.Unlock()
		return later(k.until, begun.Add(max(k.lease, reportPatience)))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// attempt runs the handler once under a context that ends when the
// executor stops, the conversation is cancelled or the lease is lost.
func (x *Executor) attempt(ctx context.Context, e *machine.Entry, queued time.Time, h Handler, lease *leaseKeeper) (Result, error, error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.mu.Lock()
	x.running[e.PendingID] = cancel
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.running, e.PendingID)
		x.mu.Unlock()
	}()
	stop := context.AfterFunc(lease.lost, func() { cancel(errLeaseLost) })
	defer stop()
	res, err := h(hctx, Call{
		PendingID: e.PendingID, ToolCallID: e.ToolCallID, ToolName: e.ToolName, Arguments: e.ToolArguments,
		ConversationID: e.ConversationID, CallerBotID: e.CallerBotID, Attempt: e.ExecutionAttempts, Entry: e, Queued: queued,
	})
	return res, err, context.Cause(hctx)
}

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
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

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
	// Attempt is how many times the call has been claimed, this run's
	// claim included: 1 for the first run. Every claim counts one more
	// (the first, a retry after a failed attempt, another executor's
	// after a lease ran out), and toolgate grants each by
	// compare-and-set, so no two runs of a call share one.
	Attempt int
	Entry   *machine.Entry
	// Queued is since when the call was runnable, by toolgate's clock:
	// when it was approved (the approval's stored time, by the NATS
	// server's clock), came due, or its last executor's lease ran out.
	Queued time.Time
}

// FencingToken names this run of the call: its PendingID, a slash and
// its Attempt ("conv-1.call-7/2"). A run that starts after another of
// the same call (its executor cut off from toolgate past its lease, or
// a retry) has a higher attempt, so whatever the tool changes can keep,
// for each call, the highest attempt it has seen and refuse a request
// with a lower one: from a run that stopped being the run. The built-in
// tools send it (FencingTokenHeader, TOOLGATE_FENCING_TOKEN).
func (c Call) FencingToken() string { return fmt.Sprintf("%s/%d", c.PendingID, c.Attempt) }

// Result is what a Handler returns: Output must be JSON.
type Result struct {
	Output json.RawMessage
	Cost   float64
}

// Handler runs one tool. An error fails the attempt; the call is tried
// again, with backoff, until its policy's maxExecutionAttempts, unless the
// error is Permanent. A Result returned with an error is recorded too.
// ctx ends when the executor stops, the call's conversation is
// cancelled, or the run stops being the call's run: its cause
// (context.Cause) is then ErrLeaseLost, LeaseMargin before a lease the
// executor could not renew would run out, so that the handler stops
// before another executor may claim the call.
type Handler func(ctx context.Context, call Call) (Result, error)

type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

// Permanent marks a handler's error that trying again cannot fix: the call
// fails at once.
func Permanent(err error) error { return permanentError{err} }

// ExecutorOptions tune an Executor.
type ExecutorOptions struct {
	// ID names this executor as the holder of the leases it takes
	// (default host-pid-random). Two executors running at once must not
	// share one: toolgate hands a call claimed under an ID, whose
	// executor does not say it has it in hand, to an executor under that
	// ID (a claim whose answer was lost, or the calls of an executor
	// restarted under its ID).
	ID string
	// Lease is how long a claim lasts without a heartbeat (default 30s);
	// heartbeats renew it every third of that, and a handler whose lease
	// no renewal carried further is stopped LeaseMargin before it would
	// run out. It is also how long (30s at least) a report toolgate does
	// not answer is sent again, so it should outlast a leader election
	// (seconds) with room to spare.
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

// Executor hosts tool handlers: it takes the runnable calls of the tools
// it has from toolgate (toolgate.work), which claims each for it by
// compare-and-set before answering it, and heartbeats from the claim
// until the result is recorded, and records it, sending a report toolgate
// does not answer again for as long as the lease lasts (30s at least). A
// call that is not approved or due, or already rejected, cancelled,
// finished or claimed by a live executor, cannot be claimed, so it is
// never run; a claimed one runs again elsewhere only when its executor
// dies (or is cut off from toolgate for longer than a lease) before
// recording it. A handler cut off so is stopped (ErrLeaseLost) before its
// lease runs out, so that two runs of a call do not overlap while the
// handler heeds its context.
type Executor struct {
	c        *Client
	opts     ExecutorOptions
	handlers map[string]Handler

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // by pendingId
	// busy holds the calls this executor has in hand, from its claim
	// until their outcome is recorded or given up.
	busy map[string]bool
	// ran holds the last attempt of each call this executor ran lately,
	// last pruned at ranPruned.
	ran       map[string]ranAttempt
	ranPruned time.Time
}

// ranAttempt is the last attempt of a call an executor ran, and when it
// ended.
type ranAttempt struct {
	attempt int
	ended   time.Time
}

// ranFor is how long an executor remembers the attempts it ran: longer
// than a claim it had in hand is handed to it again (toolgate's view of
// the call lagging behind the outcome it recorded).
const ranFor = time.Minute

// noteRan records that this executor ran attempt of pendingID, and
// forgets what it ran longer than ranFor ago. x.mu is held.
func (x *Executor) noteRan(pendingID string, attempt int) {
	now := time.Now()
	if now.Sub(x.ranPruned) > ranFor {
		for id, r := range x.ran {
			if now.Sub(r.ended) > ranFor {
				delete(x.ran, id)
			}
		}
		x.ranPruned = now
	}
	x.ran[pendingID] = ranAttempt{attempt: attempt, ended: now}
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
		handlers: map[string]Handler{}, running: map[string]context.CancelCauseFunc{}, busy: map[string]bool{}, ran: map[string]ranAttempt{},
	}, nil
}

// Handle hosts tool with h. Call it before Run.
func (x *Executor) Handle(tool string, h Handler) { x.handlers[tool] = h }

// Run takes the hosted tools' calls from toolgate until ctx ends, then
// waits for the handlers running, and records what those that succeeded
// returned. A call whose handler ended otherwise keeps its lease until it
// runs out; then toolgate offers it to another executor.
func (x *Executor) Run(ctx context.Context) error {
	if len(x.handlers) == 0 {
		return errors.New("executor: no tools to host")
	}
	sub, err := x.c.nc.Subscribe(wire.CancelSubject, x.onCancel)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var runs sync.WaitGroup
	defer runs.Wait()
	g, ctx := errgroup.WithContext(ctx)
	for tool, h := range x.handlers {
		g.Go(func() error { return x.take(ctx, tool, h, &runs) })
	}
	return g.Wait()
}

// takeWait is how long a request for work waits at toolgate for a call
// when there is none; the executor then asks again.
const takeWait = 15 * time.Second

// maxTakes is how many requests for work of one tool an executor has in
// flight at most, each asking for one call and holding the free slot to
// run it. An approval (or a submit let run) made where a request waits
// claims its call for that request in its own write, one call a request:
// so the more requests wait, the more calls start that way, without the
// work queue's hop. A request asking for every slot free would leave
// none for others to wait with (at 32 agents, half the approvals then
// found no request waiting: decision→handler p99 18.7-20.6 ms, against
// 17.3-18.9 with a call a request). A backlog is taken a call a request,
// as many at once. Idle, an executor keeps one waiting (demand).
const maxTakes = 16

// take asks toolgate for calls of tool, a call a request, with up to
// maxTakes requests (and no more than its free slots) at once, and runs
// each it gets on runs, until ctx ends. It returns an error only for a
// refusal no retry changes (a credential that may not run tools).
func (x *Executor) take(ctx context.Context, tool string, h Handler, runs *sync.WaitGroup) error {
	free := make(chan struct{}, x.opts.Concurrency)
	for range x.opts.Concurrency {
		free <- struct{}{}
	}
	takes := make(chan struct{}, maxTakes)
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	defer x.withdraw(tool) // first: the requests in flight end with it
	d := demand{changed: make(chan struct{}, 1)}
	for {
		if !d.ask(ctx) {
			return ignoreCanceled(context.Cause(ctx))
		}
		select {
		case takes <- struct{}{}:
		case <-ctx.Done():
			return ignoreCanceled(context.Cause(ctx))
		}
		select {
		case <-free:
		case <-ctx.Done():
			return ignoreCanceled(context.Cause(ctx))
		}
		inflight.Go(func() {
			defer func() { <-takes }()
			sent := time.Now()
			reply, err := x.takeWork(ctx, wire.WorkRequest{Tools: []string{tool}, Max: 1, LeaseMs: x.opts.Lease.Milliseconds(), By: x.opts.ID})
			d.answered(len(reply.Calls))
			if len(reply.Calls) == 0 {
				free <- struct{}{}
			}
			// Calls handed again (their first answer lost) may be more
			// than the one asked for: they are this executor's to run.
			for i, c := range reply.Calls {
				runs.Go(func() {
					if i == 0 {
						defer func() { free <- struct{}{} }()
					}
					x.runClaimed(ctx, c, sent, h)
				})
			}
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, machine.ErrForbidden) || errors.Is(err, machine.ErrInvalid):
				stop(fmt.Errorf("executor: taking work for %s: %w", tool, err))
			default:
				x.opts.Log.Warn("taking work failed, asking again", "tool", tool, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		})
	}
}

// demand is how many requests for work of a tool an executor keeps
// waiting: one while the last to come back brought no call (an idle
// executor asks once a wait, not once a wait for each slot), and as
// many as it may (maxTakes, its free slots) from when one brings a
// call, as at its start.
type demand struct {
	mu      sync.Mutex
	out     int  // requests asked for and not answered
	idle    bool // the last answered brought no call
	changed chan struct{}
}

// ask waits until another request may be sent, and counts it; false
// when ctx ends first.
func (d *demand) ask(ctx context.Context) bool {
	for {
		d.mu.Lock()
		if !d.idle || d.out == 0 {
			d.out++
			d.mu.Unlock()
			return true
		}
		d.mu.Unlock()
		select {
		case <-d.changed:
		case <-ctx.Done():
			return false
		}
	}
}

// answered counts a request answered with calls calls (none: idle).
func (d *demand) answered(calls int) {
	d.mu.Lock()
	d.out--
	d.idle = calls == 0
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// takeWork sends one request for work, which waits at toolgate up to
// takeWait, or a third of the lease if shorter: a claim whose answer was
// lost is handed again in the answer to a later request (wire.WorkRequest's
// Running), and that must come before its lease runs out. A reconnect
// ends the wait for the answer at once, as it may have gone with the
// server.
func (x *Executor) takeWork(ctx context.Context, r wire.WorkRequest) (wire.WorkReply, error) {
	wait := min(takeWait, x.opts.Lease/3)
	r.WaitMs = wait.Milliseconds()
	x.mu.Lock()
	for id := range x.busy {
		r.Running = append(r.Running, id)
	}
	x.mu.Unlock()
	var reply wire.WorkReply
	data, err := json.Marshal(r)
	if err != nil {
		return reply, err
	}
	reconnects := x.c.nc.StatusChanged(nats.CONNECTED)
	defer x.c.nc.RemoveStatusListener(reconnects)
	_, err, _ = x.c.attemptUntilChange(ctx, reconnects, nil, wait+reportAttemptTimeout, wire.EndpointWork, data, &reply)
	return reply, err
}

// withdrawWait bounds the request that withdraws an executor's requests
// for work when it stops.
const withdrawWait = 2 * time.Second

// withdraw ends this executor's requests for work of tool that wait at
// toolgate: once it stops, nobody would hear their answer, and a call
// claimed in one would wait out its lease (or, on its last attempt, fail
// without running). A call claimed just before toolgate hears of it
// still does.
func (x *Executor) withdraw(tool string) {
	ctx, cancel := context.WithTimeout(context.Background(), withdrawWait)
	defer cancel()
	var reply wire.WorkReply
	r := wire.WorkRequest{Tools: []string{tool}, LeaseMs: x.opts.Lease.Milliseconds(), By: x.opts.ID, Withdraw: true}
	err := x.c.request(ctx, wire.EndpointWork, r, &reply)
	var apiErr *wire.APIError
	switch {
	case err == nil, x.c.nc.IsClosed(), errors.Is(err, machine.ErrForbidden):
	case errors.Is(err, ErrUnavailable), errors.As(err, &apiErr) && apiErr.Status == 503:
		// Nothing serves the request API, or what did is stopping (as
		// serve's own intake role does beside it): no request waits.
	default:
		x.opts.Log.Warn("withdrawing the requests for work failed: a call claimed for this executor meanwhile waits out its lease", "tool", tool, "err", err)
	}
}

// ignoreCanceled is err, unless it only says that the context ended.
func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
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

// runClaimed runs a call toolgate claimed for this executor in a request
// sent at sent: its lease counts from then at the latest, or, for a call
// handed again, from its claim.
func (x *Executor) runClaimed(ctx context.Context, c wire.WorkClaim, sent time.Time, h Handler) {
	e := c.Entry
	claimed := sent
	if c.Again {
		claimed = time.UnixMilli(e.LastAttemptTime)
	}
	// A call this executor is running already is not run again: its
	// lease ran out under load (heartbeats that could not get through)
	// and toolgate offered it again, to this executor as it happened.
	// The run in hand goes on under the lease the claim renewed.
	// Nor is one whose attempt it ran already: a claim handed again
	// because toolgate did not know this executor had it in hand.
	x.mu.Lock()
	if x.busy[e.PendingID] || x.ran[e.PendingID].attempt >= e.ExecutionAttempts {
		x.mu.Unlock()
		x.opts.Log.Info("claimed again while running here, or after", "pendingId", e.PendingID, "attempt", e.ExecutionAttempts)
		return
	}
	x.busy[e.PendingID] = true
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.busy, e.PendingID)
		x.noteRan(e.PendingID, e.ExecutionAttempts)
		x.mu.Unlock()
	}()
	x.run(ctx, e, claimed, time.UnixMilli(c.RunnableSince), h)
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
// backoff included. A handler stopped because no renewal got through in
// time failed its attempt, and says why. queued is since when the call
// was runnable.
func (x *Executor) run(ctx context.Context, e *machine.Entry, claimed, queued time.Time, h Handler) {
	id := e.PendingID
	log := x.opts.Log.With("pendingId", id, "tool", e.ToolName)
	lease := x.keepLease(context.WithoutCancel(ctx), id, claimed)
	defer lease.stop()
	for {
		res, err, cause := x.attempt(ctx, e, queued, h, lease)
		if err != nil && errors.Is(cause, errLeaseEnding) {
			// Stopped before the lease could run out unrenewed: an
			// attempt that failed, saying why (and Permanent if it was).
			err = fmt.Errorf("stopped: %w: the handler returned %w", cause, err)
		}
		rec := wire.EndpointFailed
		outcome := wire.ReportRequest{PendingID: id, By: x.opts.ID, Result: res.Output, Cost: res.Cost}
		switch {
		case err == nil:
			// Done, even if this executor is stopping or its lease ran out
			// meanwhile: recorded, it does not run again elsewhere. (Had
			// another executor reclaimed the call, the record is refused.)
			rec = wire.EndpointSucceeded
		case errors.Is(cause, errLeaseRefused), ctx.Err() != nil:
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
// than asked for again and again. But an attempt on a lease waits no more
// than a third of what is left of the lease (shortened), so that the
// report is asked again until the lease is about to end, not once a
// doubled bound that outlasts it.
const (
	reportAttemptTimeout = 2 * time.Second
	reportAttemptMax     = 8 * time.Second
	// minReportAttempt is the least an attempt waits for its answer.
	minReportAttempt = 250 * time.Millisecond
	// minReportWait is the least an executor waits before asking again.
	minReportWait = 20 * time.Millisecond
)

// shortened returns d, the bound of an attempt of a report on a lease
// (or of the wait before the next), or less as by, when the lease must
// be renewed or ends, draws near: at most a part of what is left until
// by (a third for an attempt, a tenth for a wait), floor at least. Once
// by has passed, d: the lease is as good as lost, and a slow answer is
// waited for.
func shortened(d, floor time.Duration, by time.Time, part time.Duration) time.Duration {
	left := time.Until(by)
	if left <= 0 {
		return d
	}
	return max(min(d, left/part), min(floor, d))
}

// reportPatience is how long a report is sent again at least, however
// short the lease: giving up is a second run once the lease runs out, and
// trying on past the lease costs nothing but time (a report that lands
// after it is refused only if another executor has reclaimed the call).
const reportPatience = 30 * time.Second

// ask sends an executor's report, each attempt bounded (shortened as the
// lease's end draws near), again and again while toolgate does not answer
// it or fails (5xx), and returns the entry and when the attempt that got
// it was sent. A refusal ends it, except
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
	ends := func() time.Time { return time.Time{} }
	if lease != nil {
		until, ends = lease.giveUpAt(first), lease.ends
		lease.quiet.Store(true)
		defer lease.quiet.Store(false)
	}
	unanswered := false
	timeout := reportAttemptTimeout
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, shortened(timeout, minReportAttempt, ends(), 3))
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
		}
		pause := shortened(wait, minReportWait, ends(), 10)
		if time.Now().Add(pause).After(until()) {
			return nil, sent, fmt.Errorf("%w (tried since %s)", err, first.Format(time.TimeOnly))
		}
		// No answer, or toolgate failed to write: either may have written.
		// (A store without room wrote nothing, and is asked again for when
		// room is made.)
		unanswered = unanswered || !errors.Is(err, wire.ErrStorageFull)
		if lease != nil {
			lease.quiet.Store(false)
		}
		what := "no answer from toolgate, asking again"
		if errors.Is(err, wire.ErrStorageFull) {
			what = "toolgate's store is full, asking again"
		}
		x.opts.Log.Warn(what, "endpoint", endpoint, "pendingId", r.PendingID, "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return nil, sent, err
		case <-time.After(pause):
		}
		// Look before asking again: a claim asked again after its lease
		// ran out would be granted anew, as another attempt.
		rctx, cancel := context.WithTimeout(ctx, shortened(timeout, minReportAttempt, ends(), 3))
		e, _, rerr := x.c.read(rctx, r.PendingID)
		cancel()
		if rerr == nil && landed(e) {
			x.opts.Log.Info("an earlier attempt got through", "endpoint", endpoint, "pendingId", r.PendingID)
			return e, first, nil
		}
	}
}

// ErrLeaseLost is the cause (context.Cause) of a handler's context that
// ended because its run stopped being the call's run, or is about to:
// toolgate refused to renew the lease (it ran out and another executor
// claimed the call, or the call finished), or the executor could not
// renew it and it runs out within its margin (LeaseMargin), after which
// another executor may run the call.
var ErrLeaseLost = errors.New("lease lost")

var (
	// errLeaseRefused is the cause when toolgate refused a renewal.
	errLeaseRefused = fmt.Errorf("%w: toolgate refused to renew it (it ran out and another executor claimed the call, or the call finished)", ErrLeaseLost)
	// errLeaseEnding is in the cause when no renewal was answered in
	// time (leaseKeeper.watch).
	errLeaseEnding = errors.New("not renewed in time")
)

// LeaseMargin is how long before a lease toolgate has not renewed would
// run out an executor stops the handler running under it (its context
// ends with ErrLeaseLost): a fifth of the lease, and 5s at most, which is
// ample for a handler to stop and leaves the rest of a long lease to
// renewals. By then heartbeats, every third of the lease and asked again
// when unanswered, have had most of the lease to renew it. The end the
// executor counts to is the lease counted from when the last renewal
// toolgate answered was sent, before toolgate stamped it; the margin is
// the handler's time to see its context end and stop before another
// executor may claim the call.
func LeaseMargin(lease time.Duration) time.Duration { return min(lease/5, 5*time.Second) }

// leaseKeeper renews an executor's lease on one call, from the claim until
// the outcome is recorded, and knows how far the renewals toolgate
// answered carry it: a renewal's expiry counts from when it was sent.
// When none carries it past its margin, it stops the handler running.
type leaseKeeper struct {
	lease  time.Duration
	margin time.Duration // LeaseMargin(lease)
	// quiet holds renewals back (a report that renews or ends the lease
	// is in flight).
	quiet atomic.Bool
	mu    sync.Mutex
	until time.Time
	// renewedAt is when the renewal that carries the lease to until was
	// sent (the claim's request, at first).
	renewedAt time.Time
	// handler stops the handler running under the lease, if one is.
	handler context.CancelCauseFunc
	// renewal is signalled by each renewal toolgate answered.
	renewal chan struct{}
	// refused is set when toolgate refuses a renewal.
	refused bool
	stop    func()
}

// keepLease starts renewing the lease on pendingID, claimed at claimed,
// every third of the lease (the first a third after claimed) until stop;
// after a renewal that got no answer, again within a second, and sooner,
// each attempt shorter, as the time by which the lease must be renewed
// (renewBy) draws near. It stops the handler running under it (during)
// when no renewal carries the lease past LeaseMargin.
func (x *Executor) keepLease(ctx context.Context, pendingID string, claimed time.Time) *leaseKeeper {
	k := &leaseKeeper{lease: x.opts.Lease, margin: LeaseMargin(x.opts.Lease), until: claimed.Add(x.opts.Lease), renewedAt: claimed, renewal: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	k.stop = func() { cancel(); wg.Wait() }
	every := x.opts.Lease / 3
	wg.Go(func() { k.watch(ctx) })
	wg.Go(func() {
		t := time.NewTimer(max(time.Until(claimed.Add(every)), 0))
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
			actx, acancel := context.WithTimeout(ctx, shortened(timeout, minReportAttempt, k.renewBy(), 3))
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
				k.mu.Lock()
				k.refused = true
				if k.handler != nil {
					k.handler(errLeaseRefused)
				}
				k.mu.Unlock()
				return
			default:
				if ctx.Err() != nil {
					return
				}
				t.Reset(shortened(min(every, time.Second), minReportWait, k.renewBy(), 10))
			}
		}
	})
	return k
}

// renewed notes a renewal (a heartbeat, a retry's claim) sent at sent.
func (k *leaseKeeper) renewed(sent time.Time) {
	k.mu.Lock()
	if until := sent.Add(k.lease); until.After(k.until) {
		k.until, k.renewedAt = until, sent
	}
	k.mu.Unlock()
	select {
	case k.renewal <- struct{}{}:
	default:
	}
}

// ends is when the lease runs out, as far as this executor knows.
func (k *leaseKeeper) ends() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.until
}

// renewBy is when the lease must have been renewed by, as far as this
// executor knows: its end less the margin.
func (k *leaseKeeper) renewBy() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.until.Add(-k.margin)
}

// watch stops the handler running under the lease, with a cause that
// says so, once no renewal carries the lease past its margin, until ctx
// ends: toolgate may hand the call to another executor once the lease
// runs out, and this run must have stopped by then. A renewal answered
// later (the network back) carries the lease on for the runs after it.
func (k *leaseKeeper) watch(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if d := time.Until(k.renewBy()); d > 0 {
			t.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			continue
		}
		k.mu.Lock()
		if k.handler != nil {
			k.handler(k.endingCause())
		}
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-k.renewal:
		}
	}
}

// endingCause says why the handler is stopped: no renewal in time. k.mu
// is held.
func (k *leaseKeeper) endingCause() error {
	return fmt.Errorf("%w: %w: toolgate answered no renewal sent after %s, so the lease runs out by %s, and another executor may then run the call; stopped %s before",
		ErrLeaseLost, errLeaseEnding, k.renewedAt.Format("15:04:05.000"), k.until.Format("15:04:05.000"), k.margin)
}

// during has stop end the handler's context while it runs under the
// lease (until release): at once if the lease is lost already, or past
// its margin.
func (k *leaseKeeper) during(stop context.CancelCauseFunc) (release func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.handler = stop
	switch {
	case k.refused:
		stop(errLeaseRefused)
	case !time.Now().Before(k.until.Add(-k.margin)):
		stop(k.endingCause())
	}
	return func() {
		k.mu.Lock()
		k.handler = nil
		k.mu.Unlock()
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
// executor stops, the conversation is cancelled, or the lease is lost or
// about to be (ErrLeaseLost).
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
	defer lease.during(cancel)()
	res, err := h(hctx, Call{
		PendingID: e.PendingID, ToolCallID: e.ToolCallID, ToolName: e.ToolName, Arguments: e.ToolArguments,
		ConversationID: e.ConversationID, CallerBotID: e.CallerBotID, Attempt: e.ExecutionAttempts, Entry: e, Queued: queued,
	})
	return res, err, context.Cause(hctx)
}

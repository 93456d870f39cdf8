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
// time failed its attempt, and says why: a call of a tool declared
// idempotent is tried again, any other ends with its outcome unknown.
// queued is since when the call was runnable.
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
		case errors.Is(cause, errLeaseEnding) && !e.Idempotent:
			// Stopped midway, it may have done its work, and its tool is
			// not declared idempotent: nothing runs it again by itself.
			outcome.Error = "result unknown: " + err.Error() + " (the tool is not declared idempotent, so it is not run again by itself)"
			outcome.OutcomeUnknown = true
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

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
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
	// heartbeats renew it every third of that.
	Lease time.Duration
	// Backoff is the wait before each retry; the last repeats (default
	// 1s, 2s, 4s).
	Backoff []time.Duration
	// Concurrency is how many calls of one tool run at once (default 4).
	Concurrency int
	Log         *slog.Logger
}

// Executor hosts tool handlers: it consumes the tool.work.<tool> queues of
// the tools it has, claims each call by compare-and-set before running it,
// heartbeats while it runs and records the result. A call that is not
// approved or due, or already rejected, cancelled, finished or claimed by
// a live executor, cannot be claimed, so it is never run.
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
		opts.Concurrency = 4
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
// handlers running. A call stopped that way keeps its lease until it runs
// out; then the timer queues it again for another executor.
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
		}, x.opts.Log, func(ctx context.Context, msg jetstream.Msg) error {
			return x.work(ctx, msg, h)
		})
		g.Go(func() error { return r.Run(ctx) })
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
	e, err := x.c.report(ctx, wire.EndpointStarted, wire.ReportRequest{PendingID: item.PendingID, By: x.opts.ID, LeaseMs: x.opts.Lease.Milliseconds()})
	if errors.Is(err, machine.ErrConflict) || errors.Is(err, machine.ErrNotFound) {
		// Not runnable (refused, cancelled, done, not due) or held by a
		// live executor: not ours to run. The item is spent.
		x.opts.Log.Debug("not claimed", "pendingId", item.PendingID, "err", err)
		return nil
	} else if err != nil {
		return err // the bus: try the item again
	}
	x.run(ctx, e, h)
	return nil
}

// run runs a claimed call until it succeeds, fails for good, or this
// executor stops or loses the lease.
func (x *Executor) run(ctx context.Context, e *machine.Entry, h Handler) {
	id := e.PendingID
	log := x.opts.Log.With("pendingId", id, "tool", e.ToolName)
	for {
		res, err, cause := x.attempt(ctx, e, h)
		rec := wire.EndpointFailed
		outcome := wire.ReportRequest{PendingID: id, By: x.opts.ID, Result: res.Output, Cost: res.Cost}
		switch {
		case ctx.Err() != nil || errors.Is(cause, errLeaseLost):
			// Stopping, or another executor holds the call now: leave it.
			log.Info("stopped running", "cause", cause)
			return
		case err == nil:
			rec = wire.EndpointSucceeded
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
			next, err := x.c.report(ctx, wire.EndpointRetry, wire.ReportRequest{PendingID: id, By: x.opts.ID, Attempt: e.ExecutionAttempts, LeaseMs: x.opts.Lease.Milliseconds()})
			if err != nil {
				log.Info("could not claim again", "err", err)
				return
			}
			e = next
			continue
		}
		if len(outcome.Result) > 0 && !json.Valid(outcome.Result) {
			rec, outcome.Result, outcome.Error = wire.EndpointFailed, nil, "handler returned output that is not JSON"
		}
		x.record(context.WithoutCancel(ctx), log, rec, outcome)
		return
	}
}

// record reports a finished run, trying again while toolgate cannot be
// reached (a leader election takes seconds) for as long as the lease
// lasts: given up sooner, the lease runs out, the timer queues the call
// again and the tool runs twice.
func (x *Executor) record(ctx context.Context, log *slog.Logger, endpoint string, r wire.ReportRequest) {
	deadline := time.Now().Add(x.opts.Lease)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		rctx, cancel := context.WithDeadline(ctx, deadline)
		_, err := x.c.report(rctx, endpoint, r)
		cancel()
		var refused *wire.APIError
		switch {
		case err == nil:
			return
		case errors.As(err, &refused) && refused.Status < 500:
			// Not ours to record any more (the lease was lost, the
			// call cancelled): nothing a retry changes.
			log.Warn("outcome refused", "err", err)
			return
		case time.Now().Add(wait).After(deadline):
			log.Error("recording the outcome failed; the lease runs out and the call may run again", "err", err)
			return
		}
		log.Warn("recording the outcome failed, retrying", "err", err, "in", wait)
		time.Sleep(wait)
	}
}

var errLeaseLost = errors.New("lease lost")

// attempt runs the handler once under a context that ends when the
// executor stops, the conversation is cancelled or the lease is lost, and
// renews the lease while it runs.
func (x *Executor) attempt(ctx context.Context, e *machine.Entry, h Handler) (Result, error, error) {
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
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(x.opts.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_, err := x.c.report(hctx, wire.EndpointHeartbeat, wire.ReportRequest{PendingID: e.PendingID, By: x.opts.ID, LeaseMs: x.opts.Lease.Milliseconds()})
				if errors.Is(err, machine.ErrConflict) {
					cancel(errLeaseLost)
					return
				}
			}
		}
	}()
	res, err := h(hctx, Call{
		PendingID: e.PendingID, ToolCallID: e.ToolCallID, ToolName: e.ToolName, Arguments: e.ToolArguments,
		ConversationID: e.ConversationID, CallerBotID: e.CallerBotID, Attempt: e.ExecutionAttempts, Entry: e,
	})
	return res, err, context.Cause(hctx)
}

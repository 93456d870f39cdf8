package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

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

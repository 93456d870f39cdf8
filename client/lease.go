package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

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

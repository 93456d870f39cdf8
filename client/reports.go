package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

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

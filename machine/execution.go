package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Claimant is an executor waiting for work that a command making a call
// runnable claims the call for in its own write (as Claim would, to
// EXECUTING), so that the call starts with no second write between.
type Claimant struct {
	Holder string
	Lease  time.Duration
}

// claimStep is the claim for c of a call a command has just made
// runnable at now: nil when there is none to make (no claimant, or a
// call not runnable at once, which stays runnable).
func claimStep(e *Entry, now time.Time, c *Claimant) *step {
	if c == nil || c.Holder == "" || c.Lease <= 0 || (e.Status != StateApproved && e.Status != StateScheduled) || !e.Runnable(now) {
		return nil
	}
	return &step{ev: EventStart, actor: c.Holder, apply: claim(c.Holder, c.Lease, func(*Entry) (Event, string) { return EventStart, "" })}
}

// Claim hands a runnable call to the executor holder for lease: approved,
// scheduled and due, or, for a tool declared idempotent, running under a
// lease that has run out (Reclaimable). A live lease is never claimed,
// not even by its holder: a claim asked twice must not start a second
// run. Each claim is an attempt, and none is granted past the call's
// MaxExecutionAttempts.
func (m *Machine) Claim(ctx context.Context, pendingID, holder string, lease time.Duration) (*Entry, error) {
	return m.ClaimAt(ctx, pendingID, 0, holder, lease)
}

// ClaimAt is Claim from revision, as the claimant last saw the entry: the
// entry as the store remembers it at that revision, if it does, spares a
// read.
func (m *Machine) ClaimAt(ctx context.Context, pendingID string, revision uint64, holder string, lease time.Duration) (*Entry, error) {
	if holder == "" || lease <= 0 {
		return nil, fmt.Errorf("claim %s: %w", pendingID, invalidf("holder and a positive lease are required"))
	}
	// A running call is reclaimed, anything else started: the event is
	// chosen from the entry as each attempt of the write reads it.
	claimEvent := func(cur *Entry) (Event, string) {
		if cur.Status == StateExecuting {
			return EventReclaim, ""
		}
		return EventStart, ""
	}
	e, err := m.transitionFrom(ctx, pendingID, revision, claimEvent, holder, claim(holder, lease, claimEvent), nil)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", pendingID, err)
	}
	return e, nil
}

// claim is a claim's check and change of the entry, for holder's lease:
// one more attempt, of a call that is runnable or whose lease ran out.
func claim(holder string, lease time.Duration, claimEvent func(*Entry) (Event, string)) func(e *Entry, now time.Time) error {
	return func(e *Entry, now time.Time) error {
		lost := e.Lease != nil && now.UnixMilli() >= e.Lease.ExpiresAt
		if !e.Runnable(now) && !(lost && e.Reclaimable()) {
			ev, _ := claimEvent(e)
			return &TransitionError{Event: ev, Entry: e}
		}
		e.ExecutionAttempts++
		e.LastAttemptTime = now.UnixMilli()
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}
}

// Heartbeat renews the lease of the executor running a call. A lease that
// has run out is not renewed: the timer may have queued the call for
// another executor already, and the holder must stop.
func (m *Machine) Heartbeat(ctx context.Context, pendingID, holder string, lease time.Duration) (*Entry, error) {
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return EventHeartbeat, "" }, holder, func(e *Entry, now time.Time) error {
		if e.Lease == nil || e.Lease.Holder != holder || now.UnixMilli() >= e.Lease.ExpiresAt {
			return &TransitionError{Event: EventHeartbeat, Entry: e}
		}
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", pendingID, err)
	}
	return e, nil
}

// HandAgain renews, for holder, the lease of a call claimed for it whose
// claim it never had: holder says it does not hold the call (it asks for
// work without naming it), so the attempt never started, and it gets the
// same attempt again, under a fresh lease. It is the one command that
// renews a lease that has run out: nothing else can have run the call
// meanwhile, as a claim of it by another executor would hold the lease,
// and the timer's end of it would have left EXECUTING. A call of a tool
// not declared idempotent is so run, at most once, though its first claim
// was lost.
func (m *Machine) HandAgain(ctx context.Context, pendingID, holder string, lease time.Duration) (*Entry, error) {
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return EventHeartbeat, "" }, holder, func(e *Entry, now time.Time) error {
		if e.Lease == nil || e.Lease.Holder != holder {
			return &TransitionError{Event: EventHeartbeat, Entry: e}
		}
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("hand again %s: %w", pendingID, err)
	}
	return e, nil
}

// Retry starts another attempt of a call whose attempt failed, for the
// holder of its lease: attempts + 1 and a fresh lease. failed is the
// attempt that failed; a retry for any other is refused, so that only the
// run that failed can follow itself.
func (m *Machine) Retry(ctx context.Context, pendingID, holder string, failed int, lease time.Duration) (*Entry, error) {
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return EventReclaim, "retry" }, holder, func(e *Entry, now time.Time) error {
		if e.Lease == nil || e.Lease.Holder != holder || e.ExecutionAttempts != failed || e.AttemptsLeft() == 0 {
			return &TransitionError{Event: EventReclaim, Entry: e}
		}
		e.ExecutionAttempts++
		e.LastAttemptTime = now.UnixMilli()
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", pendingID, err)
	}
	return e, nil
}

// DefaultMaxExecutionAttempts bounds the claims of a call whose policy
// does not say.
const DefaultMaxExecutionAttempts = 3

// Reclaimable reports whether another executor may take e over once its
// lease runs out: a call of a tool the policy declares idempotent, with
// attempts left. Any other call whose executor is lost may have run
// already, so nothing runs it again by itself: the timer ends it with
// its outcome unknown (AbandonLease), and a person may run it again
// (Rerun).
func (e *Entry) Reclaimable() bool { return e.Idempotent && e.AttemptsLeft() > 0 }

// AttemptsLeft reports how many more times e may be claimed.
func (e *Entry) AttemptsLeft() int {
	limit := e.MaxExecutionAttempts
	if limit <= 0 {
		limit = DefaultMaxExecutionAttempts
	}
	return max(limit-e.ExecutionAttempts, 0)
}

// Outcome is what an executor reports when a call finishes.
type Outcome struct {
	Holder string // the executor holding the lease
	Result json.RawMessage
	Error  string
	Cost   float64
	// Unknown (Fail) says the run was stopped midway and may have done
	// its work: the call ends with its outcome unknown.
	Unknown bool
}

// Complete records a successful run.
func (m *Machine) Complete(ctx context.Context, pendingID string, o Outcome) (*Entry, error) {
	return m.finish(ctx, pendingID, EventSucceed, o)
}

// Fail records a failed run.
func (m *Machine) Fail(ctx context.Context, pendingID string, o Outcome) (*Entry, error) {
	return m.finish(ctx, pendingID, EventFail, o)
}

func (m *Machine) finish(ctx context.Context, pendingID string, ev Event, o Outcome) (*Entry, error) {
	if o.Cost < 0 {
		return nil, fmt.Errorf("%s %s: %w", ev, pendingID, invalidf("cost: must be >= 0, got %v", o.Cost))
	}
	if len(o.Result) > 0 && !json.Valid(o.Result) {
		return nil, fmt.Errorf("%s %s: %w", ev, pendingID, invalidf("result: not valid JSON"))
	}
	// The executor's claim (or its last heartbeat) was most likely
	// written here: start from it.
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return ev, o.Error }, o.Holder, func(e *Entry, now time.Time) error {
		// An executor whose lease ran out and was reclaimed must not
		// overwrite the run that replaced it.
		if e.Lease != nil && e.Lease.Holder != o.Holder {
			return &TransitionError{Event: ev, Entry: e}
		}
		e.Lease = nil
		e.Result = o.Result
		e.Error = o.Error
		e.Cost = o.Cost
		e.OutcomeUnknown = ev == EventFail && o.Unknown
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", ev, pendingID, err)
	}
	return e, nil
}

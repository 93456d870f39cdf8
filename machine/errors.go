package machine

import (
	"errors"
	"fmt"
	"time"
)

// The domain's errors. Adapters map them once, at their edge (HTTP status,
// NATS error header, CLI exit code); everything in between wraps them.
var (
	ErrNotFound          = errors.New("not found")
	ErrExists            = errors.New("already exists")
	ErrConflict          = errors.New("conflict")
	ErrInvalidTransition = errors.New("invalid transition")
	ErrForbidden         = errors.New("forbidden")
	ErrInvalid           = errors.New("invalid")
	// ErrExpired refuses a decision on a call whose approval deadline has
	// passed and whose policy rejects it then. It matches ErrConflict too:
	// the decision conflicts with the timeout that has the call.
	ErrExpired = fmt.Errorf("%w: approval deadline passed", ErrConflict)
	// ErrIdempotencyConflict refuses a submit that reuses a call's
	// conversation and toolCallId for another call: another caller, tool
	// or arguments. Answering it with the first call's entry would hand one
	// agent another's outcome.
	ErrIdempotencyConflict = fmt.Errorf("%w: toolCallId already used for another call", ErrConflict)
	// ErrEditDenied refuses an approval whose edited arguments the policy
	// would not let run: a deny rule matches the edited call, or the tool
	// may not be edited. It matches ErrForbidden too.
	ErrEditDenied = fmt.Errorf("%w: edit denied by policy", ErrForbidden)
)

// TransitionError says an event is not allowed in the state the entry is in
// now, and what that state is, who put it there and why: the answer an
// approver needs when someone (or the timer) decided first.
//
// It matches both ErrInvalidTransition and ErrConflict with errors.Is: the
// request conflicts with the entry's current state.
type TransitionError struct {
	Event Event
	Entry *Entry // the entry as it is now
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("%s not allowed: %s is %s", e.Event, e.Entry.PendingID, e.Entry.Status)
	if t := e.Entry.LastTransition; t != nil {
		if t.Actor != "" {
			msg += " by " + t.Actor
		}
		msg += " at " + time.UnixMilli(t.At).UTC().Format(time.RFC3339)
		if t.Reason != "" {
			msg += fmt.Sprintf(" (%s)", t.Reason)
		}
		// A call claimed since (in the approval's own write, or just
		// after) names its decider too: a second approver learns who
		// decided first.
		if by := e.Entry.ApprovedOrRejectedByUserID; by != "" && by != t.Actor && e.Entry.DecisionTime > 0 {
			msg += fmt.Sprintf(", decided by %s at %s", by, time.UnixMilli(e.Entry.DecisionTime).UTC().Format(time.RFC3339))
		}
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalidTransition) and errors.Is(err, ErrConflict) hold.
func (e *TransitionError) Is(target error) bool {
	return target == ErrInvalidTransition || target == ErrConflict
}

// invalidf returns an ErrInvalid naming the bad input.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

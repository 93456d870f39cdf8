package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// ErrRejected matches every *RejectedError: the call will not run, because
// a human rejected it, nobody answered in time, it was cancelled, or the
// policy denied it.
var ErrRejected = errors.New("tool call rejected")

// ErrInterrupted matches a *RejectedError whose rejection also asks the
// agent to stop its turn (a human's reject --interrupt): the agent should
// not go on to other calls, but stop and hand back to its user. It
// matches ErrRejected too.
var ErrInterrupted = errors.New("tool call rejected: stop the turn")

// ErrUnavailable matches the error of a request nobody answered: no
// toolgate serves its request API on the NATS the client is connected to.
var ErrUnavailable = errors.New("toolgate is not reachable")

// UnreachableError is the error of a request made while the client's
// connection to NATS was down for longer than its connect wait
// (WithConnectWait). It matches ErrUnavailable.
type UnreachableError struct {
	URL  string        // the server the connection is trying, its credentials left out
	Wait time.Duration // how long the request waited for the connection
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("toolgate is unreachable at %s: no connection to it within %s (the connection is retried until it answers)", e.URL, e.Wait)
}

// Is makes an UnreachableError match ErrUnavailable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnavailable }

// Rejection says why a call will not run.
type Rejection string

// The ways a call is refused, one per state it ends in.
const (
	RejectedByUser    Rejection = "rejected"  // REJECTED_BY_USER: a human said no
	RejectedByTimeout Rejection = "timed_out" // REJECTED_BY_TIMEOUT: nobody answered in time
	Cancelled         Rejection = "cancelled" // CANCELLED_BY_SYSTEM: cancelled before it ran
	DeniedByPolicy    Rejection = "denied"    // REJECTED_BY_POLICY: a policy rule forbids it
)

// rejections maps the states that refuse a call to their Rejection.
var rejections = map[machine.State]Rejection{
	machine.StateRejectedByUser:    RejectedByUser,
	machine.StateRejectedByTimeout: RejectedByTimeout,
	machine.StateCancelled:         Cancelled,
	machine.StateRejectedByPolicy:  DeniedByPolicy,
}

// RejectedError is a call that will not run. It is an error, not an
// outcome, so that a refusal can never be passed on as if the tool had
// run: the agent tells its model the call was refused, and why.
type RejectedError struct {
	Kind Rejection
	// By is who refused: the user who rejected or cancelled it, "timer"
	// for a timeout, "policy" for a denial.
	By string
	// Reason is why, as they said it (the entry's statusReason).
	Reason string
	// Rule names the policy rule or field that denied the call
	// (DeniedByPolicy only), e.g. rules.deny "Bash(rm -rf *)" (default).
	Rule  string
	Entry *machine.Entry // the entry as it was refused
	// Interrupt says the rejection asks the agent to stop its turn, not
	// only this call; such an error matches ErrInterrupted.
	Interrupt bool
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tool call %s (%s) ", e.Entry.PendingID, e.Entry.ToolName)
	switch e.Kind {
	case RejectedByUser:
		b.WriteString("rejected by " + e.By)
	case RejectedByTimeout:
		b.WriteString("timed out: nobody decided")
		if at := e.Entry.ApprovalTimeoutAt; at > 0 {
			b.WriteString(" by " + time.UnixMilli(at).UTC().Format(time.RFC3339))
		}
		// What a resubmit would meet, when the timer could tell.
		if _, again, ok := strings.Cut(e.Reason, "; "); ok {
			b.WriteString("; " + again)
		}
		return b.String()
	case Cancelled:
		b.WriteString("cancelled")
		if e.By != "" {
			b.WriteString(" by " + e.By)
		}
	case DeniedByPolicy:
		b.WriteString("denied by policy: " + e.Rule)
		return b.String()
	default:
		b.WriteString(string(e.Kind))
	}
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.Interrupt {
		b.WriteString("; stop this turn and hand back to the user")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrRejected) hold, and errors.Is(err,
// ErrInterrupted) for a rejection that interrupts.
func (e *RejectedError) Is(target error) bool {
	return target == ErrRejected || (e.Interrupt && target == ErrInterrupted)
}

// ExecutionError is a call that ran and failed. It is not a rejection: the
// call was allowed, and the tool's own error is in Message.
type ExecutionError struct {
	Message string  // the tool's error, as reported
	Cost    float64 // what the failed run cost
	Entry   *machine.Entry
}

func (e *ExecutionError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "no error message reported"
	}
	return fmt.Sprintf("tool call %s (%s) failed: %s", e.Entry.PendingID, e.Entry.ToolName, msg)
}

// refusal returns the *RejectedError for an entry in a refusing state, or
// nil for any other.
func refusal(e *machine.Entry) *RejectedError {
	kind, ok := rejections[e.Status]
	if !ok {
		return nil
	}
	r := &RejectedError{Kind: kind, Reason: e.StatusReason, Entry: e, Interrupt: e.Interrupt}
	if t := e.LastTransition; t != nil {
		r.By = t.Actor
	}
	switch kind {
	case RejectedByUser:
		// The transition's actor is the decider too; the field survives
		// an entry written without a transition record.
		if e.ApprovedOrRejectedByUserID != "" {
			r.By = e.ApprovedOrRejectedByUserID
		}
	case DeniedByPolicy:
		r.By, r.Rule = "policy", e.StatusReason
	}
	return r
}

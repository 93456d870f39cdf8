package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// Waiter is what SubmitAndWaitWith needs of toolgate. *Client has it;
// toolgate's HTTP role, answering a Claude Code hook in its own process,
// has it over its application layer.
type Waiter interface {
	Submit(ctx context.Context, call machine.Call) (*machine.Entry, error)
	Await(ctx context.Context, pendingID string, opts ...AwaitOption) (Outcome, error)
	Get(ctx context.Context, pendingID string) (*machine.Entry, error)
	Cancel(ctx context.Context, pendingID, by, reason string) (*machine.Entry, error)
}

var _ Waiter = (*Client)(nil)

// WaitOptions say how long SubmitAndWait waits, and how a call it stops
// waiting for is withdrawn.
type WaitOptions struct {
	// Asked is when the caller was asked about the call; the wait is
	// counted from it. Zero: when SubmitAndWait is called.
	Asked time.Time
	// Wait is how long to wait for a decision, counted from Asked; 0 is
	// the most Timeout allows (see WaitWithin, which refuses a longer one).
	Wait time.Duration
	// Timeout is how long whoever waits on the caller waits, counted from
	// Asked. What it keeps back from the wait (WaitMargin) is the time to
	// withdraw the call and answer: withdrawing, or reading a decision
	// that came first, takes at most half of it.
	Timeout time.Duration
	// By is who withdraws a call (Cancel's by): "" is the name of the
	// credential the Waiter speaks with.
	By string
	// WithdrawNote is added to the reason a withdrawn call records, after
	// "withdrawn: <why>": what the caller does instead (": handed back to
	// Claude Code's prompt"). Empty: nothing.
	WithdrawNote string
	// Stopped says why ctx ended, for the reason a call withdrawn then
	// records ("the MCP client disconnected"). Nil: ctx's cause.
	Stopped func(ctx context.Context) string
	// OnPending, when set, is called once the call is submitted and waits
	// for a human's decision (PENDING_APPROVAL), before the wait for it.
	OnPending func(e *machine.Entry)
}

// VerdictKind says what became of a call SubmitAndWait waited for.
type VerdictKind string

// The kinds of Verdict.
const (
	// VerdictRun: toolgate let the call run (approved, or scheduled and
	// due). Verdict.Outcome holds the arguments to run (Started first).
	VerdictRun VerdictKind = "run"
	// VerdictRefused: the call will not run: a human rejected it, its
	// policy denied it, it timed out or was cancelled. Verdict.Err is the
	// *RejectedError saying who and why.
	VerdictRefused VerdictKind = "refused"
	// VerdictExpired: nobody decided by the call's approval deadline, and
	// its policy rejects it then (autoRejectOnTimeout). Toolgate takes no
	// decision from the deadline on, so the call is refused, whether or
	// not its timer has recorded that yet. Verdict.ApprovalTimeout says
	// how long it waited for a human, Verdict.Entry is the call.
	VerdictExpired VerdictKind = "expired"
	// VerdictRanElsewhere: the call is past running, not through this
	// caller: it ran and succeeded (Verdict.Outcome, Kind Executed), or
	// ran and failed (Verdict.Err, an *ExecutionError).
	VerdictRanElsewhere VerdictKind = "ran_elsewhere"
	// VerdictTimedOut: nobody decided within the wait. The call was
	// withdrawn (CANCELLED_BY_SYSTEM, "withdrawn: " and Verdict.Why), or,
	// when Verdict.Err is set, withdrawing it failed and it may still be
	// pending.
	VerdictTimedOut VerdictKind = "timed_out"
	// VerdictWithdrawn: the caller stopped waiting (ctx ended), and the
	// call was withdrawn as at VerdictTimedOut, saying why in
	// Verdict.Why; Verdict.Err is set when withdrawing it failed.
	VerdictWithdrawn VerdictKind = "withdrawn"
	// VerdictUnreachable: toolgate could not be asked, or could not
	// answer: Verdict.Err says why (it matches ErrUnavailable when
	// nothing answered, machine.ErrForbidden or machine.ErrInvalid when
	// toolgate refused the request). Verdict.PendingID is empty when no
	// call is known to be recorded (the submit failed); otherwise the
	// call is left as it is, for the caller to Withdraw, unless Verdict.Why
	// is set: then toolgate could not be asked while it was being
	// withdrawn for that reason.
	VerdictUnreachable VerdictKind = "unreachable"
)

// Verdict is what became of a call SubmitAndWait submitted and waited for.
type Verdict struct {
	Kind VerdictKind
	// PendingID is the call's ("" when the submit failed).
	PendingID string
	// Outcome is what toolgate let run (VerdictRun) or how the call ran
	// (VerdictRanElsewhere).
	Outcome Outcome
	// Err is the *RejectedError of VerdictRefused, the *ExecutionError of
	// a call that ran elsewhere and failed, why toolgate could not be
	// asked (VerdictUnreachable), or why withdrawing the call failed
	// (VerdictTimedOut, VerdictWithdrawn).
	Err error
	// Why is why the call was withdrawn (VerdictTimedOut,
	// VerdictWithdrawn; see VerdictUnreachable).
	Why string
	// Entry is the call as submitted, and ApprovalTimeout how long it
	// waited for a human's decision (VerdictExpired).
	Entry           *machine.Entry
	ApprovalTimeout time.Duration
}

// SubmitAndWait is SubmitAndWaitWith over c.
func (c *Client) SubmitAndWait(ctx context.Context, call machine.Call, opts WaitOptions) Verdict {
	return SubmitAndWaitWith(ctx, c, call, opts)
}

// Withdraw is WithdrawWith over c.
func (c *Client) Withdraw(ctx context.Context, pendingID, why string, opts WaitOptions) Verdict {
	return WithdrawWith(ctx, c, pendingID, why, opts)
}

// SubmitAndWaitWith submits the call through g and waits for its verdict
// within opts.Wait, for a caller that must answer before opts.Timeout (a
// Claude Code hook, an MCP server). The call needs its ToolCallID: a
// submit cut short is withdrawn by it.
//
// What ends the wait is fixed in advance, from the entry toolgate
// recorded, so that it never depends on which of two clocks fires first:
//
//   - When the call's approval timeout is at most the wait (equal
//     included) and its policy rejects unanswered calls then
//     (autoRejectOnTimeout), the deadline decides: SubmitAndWait waits
//     until it and answers VerdictExpired, without waiting for toolgate's
//     timer. Toolgate refuses any decision from the deadline on, so the
//     call's state then is final; a decision recorded before it stands.
//   - Otherwise (a longer approval timeout, or a policy that keeps overdue
//     calls pending) the wait decides. At its end the call is withdrawn
//     (CANCELLED_BY_SYSTEM, "withdrawn: no decision within <wait>"):
//     VerdictTimedOut. The wait is counted from opts.Asked, before the
//     submit, so it ends before a deadline that comes after it: the timer
//     cannot have acted yet.
//
// When ctx ends first (whoever waits on the caller stopped waiting) the
// call is withdrawn too, saying why (opts.Stopped): VerdictWithdrawn. A
// decision that lands while the call is being withdrawn stands, and is
// the verdict. When toolgate cannot be asked, the verdict is
// VerdictUnreachable, and a call submitted before is left as it is. It
// never fails open: only VerdictRun lets the call run.
func SubmitAndWaitWith(ctx context.Context, g Waiter, call machine.Call, opts WaitOptions) Verdict {
	asked := opts.Asked
	if asked.IsZero() {
		asked = time.Now()
	}
	wait, err := WaitWithin(opts.Wait, opts.Timeout, "the caller's", "it gives up")
	if err != nil {
		return Verdict{Kind: VerdictUnreachable, Err: err}
	}
	if call.ToolCallID == "" {
		return Verdict{Kind: VerdictUnreachable, Err: fmt.Errorf("%w: toolCallId: required, to withdraw a call whose submit is cut short", machine.ErrInvalid)}
	}
	w := withdrawer{g: g, opts: opts}
	id := machine.PendingID(call.ConversationID, call.ToolCallID)
	waitOver := fmt.Sprintf("no decision within %s", wait)

	sctx, cancel := context.WithDeadline(ctx, asked.Add(wait))
	defer cancel()
	e, err := g.Submit(sctx, call)
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		// Nothing answered the submit: no call was recorded to withdraw.
		return Verdict{Kind: VerdictUnreachable, Err: err}
	case ctx.Err() != nil:
		// The submit may have landed just the same: withdraw what it made.
		return w.withdraw(ctx, id, VerdictWithdrawn, w.stopped(ctx))
	case sctx.Err() != nil:
		return w.withdraw(ctx, id, VerdictTimedOut, waitOver)
	default:
		return Verdict{Kind: VerdictUnreachable, Err: err}
	}

	until, deadlineDecides := asked.Add(wait), false
	if e.Status == machine.StatePendingApproval {
		if opts.OnPending != nil {
			opts.OnPending(e)
		}
		if e.AutoRejectOnTimeout && e.ApprovalTimeoutAt > 0 {
			// Both stamps are toolgate's, so the approval timeout is
			// measured on one clock; counted from after the submit
			// returned, the caller's deadline is not before toolgate's.
			// Only a submit that took longer than the time withdrawing is
			// given leaves no time to wait for it.
			t := approvalTimeout(e)
			if d := time.Now().Add(t); t <= wait && !d.After(asked.Add(wait+w.spare())) {
				until, deadlineDecides = d, true
			}
		}
	}
	actx, cancelAwait := context.WithDeadline(ctx, until)
	defer cancelAwait()
	o, err := g.Await(actx, e.PendingID)
	if v, ok := decided(e.PendingID, o, err); ok {
		return v
	}
	switch {
	case ctx.Err() != nil:
		return w.withdraw(ctx, e.PendingID, VerdictWithdrawn, w.stopped(ctx))
	case actx.Err() != nil && deadlineDecides:
		return w.expired(ctx, e)
	case actx.Err() != nil:
		return w.withdraw(ctx, e.PendingID, VerdictTimedOut, waitOver)
	default:
		return Verdict{Kind: VerdictUnreachable, PendingID: e.PendingID, Err: err}
	}
}

// WithdrawWith withdraws the call pendingID through g, as SubmitAndWaitWith
// does when it stops waiting: it cancels the call (by opts.By, recording
// "withdrawn: <why>" and opts.WithdrawNote) and answers VerdictWithdrawn,
// with Err set when the cancel failed. A decision that landed first
// stands, and is the verdict. It takes at most half of
// WaitMargin(opts.Timeout), even once ctx has ended.
func WithdrawWith(ctx context.Context, g Waiter, pendingID, why string, opts WaitOptions) Verdict {
	return withdrawer{g: g, opts: opts}.withdraw(ctx, pendingID, VerdictWithdrawn, why)
}

// decided is the verdict of what Await returned, when it is one: a
// decision, or a run. ok is false for any other error.
func decided(pendingID string, o Outcome, err error) (v Verdict, ok bool) {
	var (
		rej     *RejectedError
		execErr *ExecutionError
	)
	switch {
	case errors.As(err, &rej):
		return Verdict{Kind: VerdictRefused, PendingID: pendingID, Err: rej}, true
	case errors.As(err, &execErr):
		return Verdict{Kind: VerdictRanElsewhere, PendingID: pendingID, Outcome: o, Err: execErr}, true
	case err != nil:
		return Verdict{}, false
	case o.Runnable():
		return Verdict{Kind: VerdictRun, PendingID: pendingID, Outcome: o}, true
	default:
		// Executed, or a kind this client does not know: not to run.
		return Verdict{Kind: VerdictRanElsewhere, PendingID: pendingID, Outcome: o}, true
	}
}

// approvalTimeout is how long e waits for a human's decision, on
// toolgate's clock.
func approvalTimeout(e *machine.Entry) time.Duration {
	return time.Duration(e.ApprovalTimeoutAt-e.RequestedAt) * time.Millisecond
}

// withdrawer ends a wait through g.
type withdrawer struct {
	g    Waiter
	opts WaitOptions
}

// spare is what withdrawing a call, or reading a decision that came first,
// may take: half of what the caller's timeout keeps back from the wait.
func (w withdrawer) spare() time.Duration { return WaitMargin(w.opts.Timeout) / 2 }

// stopped says why ctx ended.
func (w withdrawer) stopped(ctx context.Context) string {
	if w.opts.Stopped != nil {
		return w.opts.Stopped(ctx)
	}
	return context.Cause(ctx).Error()
}

// withdraw cancels the call pendingID, saying why, and answers kind; a
// decision that landed first stands.
func (w withdrawer) withdraw(ctx context.Context, pendingID string, kind VerdictKind, why string) Verdict {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.spare())
	defer cancel()
	_, err := w.g.Cancel(wctx, pendingID, w.opts.By, "withdrawn: "+why+w.opts.WithdrawNote)
	switch {
	case err == nil, errors.Is(err, machine.ErrNotFound): // not found: the submit never landed
		return Verdict{Kind: kind, PendingID: pendingID, Why: why}
	case errors.Is(err, machine.ErrConflict):
		// Decided (or denied by policy, or claimed) just as it was
		// withdrawn.
		o, err := w.g.Await(wctx, pendingID)
		if v, ok := decided(pendingID, o, err); ok {
			return v
		}
		return Verdict{Kind: VerdictUnreachable, PendingID: pendingID, Why: why, Err: err}
	default:
		// The call may still be pending in toolgate, and be decided later.
		return Verdict{Kind: kind, PendingID: pendingID, Why: why, Err: err}
	}
}

// expired answers a call whose approval deadline has passed while the
// caller waited. Its policy rejects unanswered calls then, and toolgate
// refuses a decision from the deadline on, so what the entry says now is
// final: a call still pending is refused, whether or not the timer has
// written it yet.
func (w withdrawer) expired(ctx context.Context, e *machine.Entry) Verdict {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.spare())
	defer cancel()
	v := Verdict{Kind: VerdictExpired, PendingID: e.PendingID, Entry: e, ApprovalTimeout: approvalTimeout(e)}
	cur, err := w.g.Get(rctx, e.PendingID)
	if err != nil || cur.Status == machine.StatePendingApproval {
		return v
	}
	// Decided before the deadline: that decision stands. A run that
	// failed, or an answer that cannot be read, leaves it refused.
	o, err := w.g.Await(rctx, e.PendingID)
	if d, ok := decided(e.PendingID, o, err); ok && (d.Err == nil || d.Kind == VerdictRefused) {
		return d
	}
	return v
}

package claudecode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// How long Claude Code waits for a hook unless its "timeout" setting says
// otherwise, as its hooks reference documents them.
const (
	DefaultTimeout     = 600 * time.Second // a command hook
	DefaultHTTPTimeout = 30 * time.Second  // an HTTP hook
)

// WaitFor returns how long a hook that Claude Code gives timeout (0:
// DefaultTimeout) waits for toolgate's verdict: wait, or when wait is 0
// the most timeout allows, which is timeout less 10 seconds (less half of
// it, under 20). A longer wait would have Claude Code stop the hook before
// it withdrew the call, so it is refused, saying so.
func WaitFor(wait, timeout time.Duration) (time.Duration, error) {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return client.WaitWithin(wait, timeout, "the hook's", "Claude Code stops waiting")
}

// ParseDuration reads a wait or timeout as Claude Code's settings write a
// hook's timeout, in seconds ("600", "0.5"), or as a Go duration ("10m").
func ParseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: want seconds (600) or a duration (10m)", machine.ErrInvalid, s)
	}
	return d, nil
}

// decide submits the call and waits for its verdict, within the hook's
// wait. What happens at the end of the wait is fixed in advance, from the
// entry toolgate recorded, so that it never depends on which of two
// clocks fires first:
//
//   - When the call's approval timeout is at most the wait (equal
//     included) and its policy rejects unanswered calls then
//     (autoRejectOnTimeout), the deadline decides. The hook waits until
//     it and answers deny: toolgate refuses any decision from the
//     deadline on, so the call's state then is final, and the timer
//     records it REJECTED_BY_TIMEOUT.
//   - Otherwise (a longer approval timeout, or a policy that keeps
//     overdue calls pending) the wait decides. At its end the hook
//     withdraws the call (CANCELLED_BY_SYSTEM, saying why) and hands the
//     decision back to Claude Code's own prompt: ask. The wait is counted
//     from before the submit, so it ends before a deadline that comes
//     after it: the timer cannot have acted yet.
//
// A decision that lands while the call is being withdrawn stands, and is
// answered. When ctx ends first (Claude Code stopped waiting: the command
// hook killed at its timeout, the HTTP hook's client gone, the MCP
// request cancelled) the call is withdrawn too, with ctx's cause as the
// reason.
func decide(ctx context.Context, g Gate, in Input, opts Options) Decision {
	asked := opts.Asked
	if asked.IsZero() {
		asked = time.Now()
	}
	wait, err := WaitFor(opts.Wait, opts.Timeout)
	if err != nil {
		return Unreachable(opts, err)
	}
	// What withdrawing the call may take: half the time the wait leaves.
	spare := client.WaitMargin(opts.timeout()) / 2
	call := in.Call(opts.Caller, opts.Team)
	id := machine.PendingID(call.ConversationID, call.ToolCallID)
	waitOver := fmt.Sprintf("no decision within %s", wait)

	sctx, cancel := context.WithDeadline(ctx, asked.Add(wait))
	defer cancel()
	e, err := g.Submit(sctx, call)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The submit may have landed just the same: withdraw what it made.
		return withdraw(ctx, g, id, opts, spare, stopped(ctx))
	case sctx.Err() != nil:
		return withdraw(ctx, g, id, opts, spare, waitOver)
	default:
		return Unreachable(opts, err)
	}

	until, deadlineDecides := asked.Add(wait), false
	if e.Status == machine.StatePendingApproval && e.AutoRejectOnTimeout && e.ApprovalTimeoutAt > 0 {
		// Both stamps are toolgate's, so the approval timeout is measured
		// on one clock; counted from after the submit returned, the hook's
		// deadline is not before toolgate's. Only a submit that took longer
		// than the spare time leaves no time to wait for it.
		t := time.Duration(e.ApprovalTimeoutAt-e.RequestedAt) * time.Millisecond
		if d := time.Now().Add(t); t <= wait && !d.After(asked.Add(wait+spare)) {
			until, deadlineDecides = d, true
		}
	}
	actx, cancelAwait := context.WithDeadline(ctx, until)
	defer cancelAwait()
	o, err := g.Await(actx, e.PendingID)
	switch {
	case err == nil, errors.Is(err, client.ErrRejected):
		return Decide(o, err)
	case ctx.Err() != nil:
		return withdraw(ctx, g, e.PendingID, opts, spare, stopped(ctx))
	case actx.Err() != nil && deadlineDecides:
		return timedOut(ctx, g, e, opts, spare)
	case actx.Err() != nil:
		return withdraw(ctx, g, e.PendingID, opts, spare, waitOver)
	default:
		return Unreachable(opts, err)
	}
}

func (o Options) timeout() time.Duration {
	if o.Timeout == 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

// stopped says why ctx ended: Claude Code stopped waiting for the hook.
func stopped(ctx context.Context) string {
	return fmt.Sprintf("Claude Code stopped waiting (%v)", context.Cause(ctx))
}

// withdraw cancels the call pendingID, saying why, and hands the decision
// back to Claude Code's prompt; a decision that landed first stands. When
// the call cannot be withdrawn, opts.OnError (default Deny) answers.
func withdraw(ctx context.Context, g Gate, pendingID string, opts Options, spare time.Duration, why string) Decision {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spare)
	defer cancel()
	_, err := g.Cancel(wctx, pendingID, opts.Caller, "withdrawn: "+why+": handed back to Claude Code's prompt")
	switch {
	case err == nil, errors.Is(err, machine.ErrNotFound): // not found: the submit never landed
		return Decision{Behavior: Ask, Reason: "toolgate: " + pendingID + ": withdrawn: " + why + ": handed back to Claude Code's prompt"}
	case errors.Is(err, machine.ErrConflict):
		// Decided (or denied by policy) just as we withdrew it.
		o, err := g.Await(wctx, pendingID)
		if err != nil && !errors.Is(err, client.ErrRejected) {
			return Unreachable(opts, err)
		}
		return Decide(o, err)
	default:
		// The call may still be pending in toolgate, and be decided later:
		// as when toolgate cannot be reached, OnError answers.
		return Decision{Behavior: cmp.Or(opts.OnError, Deny), Reason: fmt.Sprintf("toolgate: %s: %s, and withdrawing it failed (%v)", pendingID, why, err)}
	}
}

// timedOut answers a call whose approval deadline has passed while the hook
// waited. Its policy rejects unanswered calls then, and toolgate refuses a
// decision from the deadline on, so what the entry says now is final: a
// call still pending is rejected, whether or not the timer has written it
// yet.
func timedOut(ctx context.Context, g Gate, e *machine.Entry, opts Options, spare time.Duration) Decision {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spare)
	defer cancel()
	timeout := time.Duration(e.ApprovalTimeoutAt-e.RequestedAt) * time.Millisecond
	denied := Decision{Behavior: Deny, Reason: fmt.Sprintf("toolgate: %s: timed out: nobody decided within its approval timeout (%s), and its policy rejects it then (autoRejectOnTimeout)", e.PendingID, timeout)}
	cur, err := g.Get(rctx, e.PendingID)
	if err != nil || cur.Status == machine.StatePendingApproval {
		return denied
	}
	o, err := g.Await(rctx, e.PendingID)
	if err != nil && !errors.Is(err, client.ErrRejected) {
		return denied
	}
	return Decide(o, err)
}

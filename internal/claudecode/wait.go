package claudecode

import (
	"cmp"
	"context"
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
// wait (client.SubmitAndWaitWith says what ends the wait, and how a call
// is withdrawn), and puts the verdict in the hooks' words:
//
//   - a call toolgate lets run (or that has run) is allowed, one it
//     refuses denied, saying who and why;
//   - a call whose approval deadline came within the wait, under a
//     policy that rejects unanswered calls, is denied as timed out;
//   - a call nobody decided within the wait, or that Claude Code stopped
//     waiting for (the command hook killed at its timeout, the HTTP
//     hook's client gone, the MCP request cancelled), is withdrawn
//     (CANCELLED_BY_SYSTEM, saying why, then note) and answered ask:
//     Claude Code's own prompt decides (the permission-prompt tool, which
//     has none, denies). When it cannot be withdrawn, opts.OnError
//     (default Deny) answers;
//   - when toolgate cannot be asked, Unreachable answers.
//
// note ends the reason a withdrawn call records and is answered with: the
// hooks' handedBack, nothing for the permission-prompt tool.
func decide(ctx context.Context, g Gate, in Input, opts Options, note string) Decision {
	wait, err := WaitFor(opts.Wait, opts.Timeout)
	if err != nil {
		return Unreachable(opts, err)
	}
	var pending *machine.Entry // the call as it waited for a human, if it did
	v := client.SubmitAndWaitWith(ctx, g, in.Call(opts.Caller, opts.Team), client.WaitOptions{
		Asked: opts.Asked, Wait: wait, Timeout: opts.timeout(), By: opts.Caller, WithdrawNote: note, Stopped: stopped,
		OnPending: func(e *machine.Entry) { pending = e },
	})
	switch v.Kind {
	case client.VerdictRun, client.VerdictRefused:
		return Decide(v.Outcome, v.Err)
	case client.VerdictRanElsewhere:
		if v.Err != nil {
			return Unreachable(opts, v.Err) // it ran and failed: nothing to allow
		}
		return Decide(v.Outcome, nil)
	case client.VerdictExpired:
		return Decision{Behavior: Deny, Reason: fmt.Sprintf("toolgate: %s: timed out: nobody decided within its approval timeout (%s), and its policy rejects it then (autoRejectOnTimeout)", v.PendingID, v.ApprovalTimeout),
			Context: refusedContext(&client.RejectedError{Kind: client.RejectedByTimeout, Entry: v.Entry})}
	case client.VerdictTimedOut, client.VerdictWithdrawn:
		if v.Err != nil {
			// The call may still be pending in toolgate, and be decided
			// later: as when toolgate cannot be reached, OnError answers.
			return Decision{Behavior: cmp.Or(opts.OnError, Deny), Reason: fmt.Sprintf("toolgate: %s: %s, and withdrawing it failed (%v)", v.PendingID, v.Why, v.Err),
				Context: whileWaiting(pending, "toolgate stopped waiting for it and could not withdraw it, so it is "+fallback(opts.OnError)+".")}
		}
		then := "Nobody decided within the hook's wait (" + v.Why + "): toolgate withdrew it."
		if note == handedBack {
			then += " Claude Code's own prompt decides now."
		}
		return Decision{Behavior: Ask, Reason: "toolgate: " + v.PendingID + ": withdrawn: " + v.Why + note, Context: whileWaiting(pending, then)}
	default:
		return Unreachable(opts, v.Err)
	}
}

// deferUntilDecided answers a headless session's PreToolUse: a call that
// waits for a human is deferred at once (Claude Code ends the session at
// it, and the caller resumes it once someone decided), and stays pending
// in toolgate, never withdrawn. The resumed session's hook submits the
// same call (its session and tool_use_id), finds it, and answers from
// toolgate's decision as decide does; while nobody has decided, it defers
// again. A call past an approval deadline at which its policy rejects it
// is denied as timed out. Anything else (a rule's verdict, a decision)
// answers as decide.
func deferUntilDecided(ctx context.Context, g Gate, in Input, opts Options) Decision {
	wait, err := WaitFor(opts.Wait, opts.Timeout)
	if err != nil {
		return Unreachable(opts, err)
	}
	asked := cmp.Or(opts.Asked, time.Now())
	sctx, cancel := context.WithDeadline(ctx, asked.Add(wait))
	defer cancel()
	e, err := g.Submit(sctx, in.Call(opts.Caller, opts.Team))
	if err != nil {
		return Unreachable(opts, err)
	}
	if e.Status != machine.StatePendingApproval {
		return decide(ctx, g, in, opts, handedBack)
	}
	if e.AutoRejectOnTimeout && e.ApprovalTimeoutAt > 0 && !time.Now().Before(time.UnixMilli(e.ApprovalTimeoutAt)) {
		return Decision{Behavior: Deny, Reason: fmt.Sprintf("toolgate: %s: timed out: nobody decided by its deadline %s, and its policy rejects it then (autoRejectOnTimeout)", e.PendingID, stamp(e.ApprovalTimeoutAt)),
			Context: refusedContext(&client.RejectedError{Kind: client.RejectedByTimeout, Entry: e})}
	}
	return Decision{Behavior: Defer,
		Reason:  fmt.Sprintf("toolgate: %s waits for a human's decision: deferred; resume the session (claude -p --resume %s) once it is decided", e.PendingID, in.SessionID),
		Context: pendingContext(e, "This session pauses at the call; when it is resumed after the decision, toolgate answers from it.")}
}

// whileWaiting is the context of a call the hook stopped waiting for:
// who was asked and by when (when the call got that far), then what the
// hook did.
func whileWaiting(pending *machine.Entry, then string) string {
	if pending == nil {
		return then
	}
	return pendingContext(pending, then)
}

// handedBack is how the hooks' reasons end when Claude Code's own prompt
// decides; the permission-prompt tool has none, and denies instead.
const handedBack = ": handed back to Claude Code's prompt"

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

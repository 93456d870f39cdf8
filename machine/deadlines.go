package machine

import (
	"context"
	"fmt"
	"time"
)

// Remind marks a call still pending approval as reminded, once, at its
// reminderAt: the event it publishes tells its approvers again before the
// deadline. A call decided, or reminded, before is left alone.
func (m *Machine) Remind(ctx context.Context, pendingID string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventRemind, "timer", "approval deadline approaching", func(e *Entry, now time.Time) error {
		if e.Reminded || e.ReminderAt == 0 || now.UnixMilli() < e.ReminderAt {
			return &TransitionError{Event: EventRemind, Entry: e}
		}
		e.Reminded = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("remind %s: %w", pendingID, err)
	}
	return e, nil
}

// Expire handles a pending call whose approval deadline has passed: it is
// rejected (REJECTED_BY_TIMEOUT) when its policy says autoRejectOnTimeout,
// cancelled or approved when its onTimeout says so (an approval only when
// the call may still be approved so, else rejected, saying why: see
// timeoutApproval), and otherwise flagged overdue, once, and left
// pending. Each outcome but the flag is the timer's decision
// (DecidedByTimeout).
func (m *Machine) Expire(ctx context.Context, pendingID string) (*Entry, error) {
	expireEvent := func(cur *Entry) (Event, string) {
		switch {
		case cur.OnTimeout == TimeoutCancel:
			return EventCancel, "approval timed out: cancelled (onTimeout cancel)"
		case cur.OnTimeout == TimeoutApprove:
			if why := m.timeoutApproval(ctx, cur); why != "" {
				return EventTimeout, "approval timed out: rejected, not approved as onTimeout says, because " + why
			}
			return EventApprove, "approval timed out: approved (onTimeout approve)"
		case cur.AutoRejectOnTimeout:
			return EventTimeout, "approval timed out"
		}
		return EventOverdue, "approval overdue, kept pending"
	}
	e, err := m.transitionBy(ctx, pendingID, expireEvent, "timer", func(e *Entry, now time.Time) error {
		// A timer whose clock runs ahead must not reject what a human
		// still has time to answer; a call is flagged overdue only once.
		ev := e.LastTransition.Event
		if now.UnixMilli() < e.ApprovalTimeoutAt || (ev == EventOverdue && e.Overdue) || e.Status != StatePendingApproval {
			return &TransitionError{Event: ev, Entry: e}
		}
		if ev != EventOverdue {
			e.DecisionTime = now.UnixMilli()
			e.LastTransition.DecidedBy = DecidedByTimeout
		}
		switch ev {
		case EventTimeout:
			if again := m.resubmitted(ctx, e); again != "" {
				e.LastTransition.Reason += "; " + again
			}
		case EventApprove:
			e.DecisionScope = ScopeOnce
		}
		e.Overdue = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expire %s: %w", pendingID, err)
	}
	return e, nil
}

// resubmitted says what the call e would meet if its agent submitted it
// again now, for the agent told it timed out: asked again, run, or
// denied, and by what. It says nothing when the policy cannot tell
// without side effects.
func (m *Machine) resubmitted(ctx context.Context, e *Entry) string {
	ec, ok := m.eval.(EditChecker)
	if !ok {
		return ""
	}
	v, err := ec.EvaluateDry(ctx, e.Call())
	if err != nil {
		return ""
	}
	switch v.Action {
	case ActionAsk:
		return "a resubmit would be asked again (" + v.Reason + ")"
	case ActionDeny:
		return "a resubmit would be denied (" + v.Reason + ")"
	default:
		return "a resubmit would run without asking (" + v.Reason + ")"
	}
}

// AbandonLease ends a running call whose executor's lease ran out and
// that no other executor may take over (see Reclaimable): a tool not
// declared idempotent, or the last allowed attempt. The tool may have
// run, so the call fails with its outcome unknown, saying so; a person
// may run it again (Rerun).
func (m *Machine) AbandonLease(ctx context.Context, pendingID string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventFail, "timer", "executor lost: result unknown", func(e *Entry, now time.Time) error {
		if e.Lease == nil || now.UnixMilli() < e.Lease.ExpiresAt || e.Reclaimable() {
			return &TransitionError{Event: EventFail, Entry: e}
		}
		why := "the tool is not declared idempotent, so nothing runs it again by itself"
		if e.Idempotent {
			why = "it was the last attempt allowed"
		}
		e.Error = fmt.Sprintf("result unknown: executor %s lost its lease on attempt %d before reporting, and the tool may have run; %s (a person may run it again: toolgate retry)",
			e.Lease.Holder, e.ExecutionAttempts, why)
		e.OutcomeUnknown = true
		e.Lease = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("abandon %s: %w", pendingID, err)
	}
	return e, nil
}

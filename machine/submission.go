package machine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Submit evaluates the policy for c and creates its entry in the first state
// the verdict calls for. Submitting the same call (conversation,
// toolCallId, caller, tool and arguments) again returns the entry already
// there, unchanged: agents retry. Reusing the conversation and toolCallId
// for another call is refused with ErrIdempotencyConflict.
func (m *Machine) Submit(ctx context.Context, c Call) (*Entry, error) {
	e, _, err := m.SubmitOnce(ctx, c)
	return e, err
}

// SubmitOnce is Submit, and reports whether this submit created the
// entry (false: it answers with the entry an earlier one created).
func (m *Machine) SubmitOnce(ctx context.Context, c Call) (*Entry, bool, error) {
	return m.SubmitAndClaim(ctx, c, nil)
}

// SubmitAndClaim is SubmitOnce for a call that, should the policy let it
// run at once, is claimed for claimant (when not nil): the entry is then
// created claimed for it (scheduled and started, two receipts, one
// write).
func (m *Machine) SubmitAndClaim(ctx context.Context, c Call, claimant *Claimant) (*Entry, bool, error) {
	if err := c.validate(); err != nil {
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	id := PendingID(c.ConversationID, c.ToolCallID)
	// A retry of a call is answered with the call, before the policy
	// takes a budget's or a rate limit's share for it again.
	if abs, ok := m.store.(AbsenceStore); !ok || !abs.Absent(id) {
		if e, _, err := m.store.Get(ctx, id); err == nil {
			return sameCall(e, c)
		} else if !errors.Is(err, ErrNotFound) {
			return nil, false, fmt.Errorf("submit %s: %w", id, err)
		}
	}
	v, err := m.eval.Evaluate(ctx, c)
	if err != nil {
		return nil, false, fmt.Errorf("submit %s: policy: %w", id, err)
	}
	now := m.now()
	e := &Entry{
		PendingID:       id,
		ToolCallID:      c.ToolCallID,
		ToolName:        c.ToolName,
		ToolArguments:   c.Arguments,
		ArgumentsDigest: ArgumentsDigest(c.Arguments),
		PolicyRevision:  v.PolicyRevision,
		Risk:            v.Risk,
		CallerBotID:     c.CallerBotID,
		ConversationID:  c.ConversationID,
		RequestedAt:     now.UnixMilli(),
		StatusReason:    v.Reason,
		Team:            c.Team,
		TaskID:          c.TaskID,
		EstimatedCost:   c.EstimatedCost,
		Currency:        v.Currency,
		OverCostLimit:   v.OverCostLimit,
		PermissionMode:  c.PermissionMode,
		Description:     v.Description,

		MaxExecutionAttempts: v.MaxExecutionAttempts,
		Idempotent:           v.Idempotent,
		CostReserved:         v.CostReserved,
		CostDay:              v.CostDay,
	}
	var ev Event
	switch v.Action {
	case ActionAsk:
		ev = EventAsk
		timeout := v.ApprovalTimeout
		if timeout <= 0 {
			timeout = DefaultApprovalTimeout
		}
		e.ApprovalTimeoutAt = now.Add(timeout).UnixMilli()
		if r := v.ApprovalReminder; r > 0 && r < timeout {
			e.ReminderAt = now.Add(r).UnixMilli()
		}
		e.AutoRejectOnTimeout = v.AutoRejectOnTimeout || v.OnTimeout == TimeoutReject
		e.OnTimeout, e.Respondable, e.NotEditable = v.timeoutOutcome(), v.Respondable, v.NotEditable
		e.UserIDToApprove = v.Approver
		e.Approvers = v.Approvers
		e.Quorum = v.Quorum
		for _, t := range v.Escalate {
			e.Escalations = append(e.Escalations, Escalation{At: now.Add(t.After).UnixMilli(), To: t.To})
		}
	case ActionRun:
		ev = EventSchedule
		e.ScheduledExecutionTime = now.Add(max(v.Delay, 0)).UnixMilli()
	case ActionDeny:
		ev = EventDeny
		e.DecisionTime = now.UnixMilli()
	default:
		return nil, false, fmt.Errorf("submit %s: policy gave unknown action %q", id, v.Action)
	}
	e.Status, _ = ev.Target()
	e.DecidedBy = cmp.Or(v.DecidedBy, DecidedByPolicy)
	e.LastTransition = &Transition{Event: ev, To: e.Status, Actor: "policy", Reason: v.Reason, DecidedBy: e.DecidedBy, At: now.UnixMilli(), Write: writeID()}
	if err := m.seal(e); err != nil {
		return nil, false, fmt.Errorf("submit %s: %w", id, err)
	}
	if st := claimStep(e, now, claimant); st != nil {
		if err := m.follow(e, now, st); err != nil {
			return nil, false, fmt.Errorf("submit %s: %w", id, err)
		}
	}
	if _, err := m.store.Create(ctx, e); errors.Is(err, ErrExists) {
		// A retry of the same call raced us to it: theirs stands.
		existing, _, err := m.store.Get(ctx, id)
		if err != nil {
			return nil, false, fmt.Errorf("submit %s: %w", id, err)
		}
		return sameCall(existing, c)
	} else if err != nil {
		return nil, false, fmt.Errorf("submit %s: %w", id, err)
	}
	m.observe(ctx, e)
	return e, true, nil
}

// sameCall is SameCall for SubmitOnce: an answer that created nothing.
func sameCall(e *Entry, c Call) (*Entry, bool, error) {
	e, err := SameCall(e, c)
	return e, false, err
}

// SameCall returns e, the entry already under a submitted call's id, if
// it is that call: same caller, tool and arguments (as first submitted,
// before any approver's edit); else ErrIdempotencyConflict.
func SameCall(e *Entry, c Call) (*Entry, error) {
	id := e.PendingID
	args := e.ToolArguments
	if e.OriginalArguments != nil {
		args = e.OriginalArguments
	}
	var differs []string
	if e.CallerBotID != c.CallerBotID {
		differs = append(differs, fmt.Sprintf("callerBotId %q, not %q", e.CallerBotID, c.CallerBotID))
	}
	if e.ToolName != c.ToolName {
		differs = append(differs, fmt.Sprintf("toolName %q, not %q", e.ToolName, c.ToolName))
	}
	if !SameJSON(args, c.Arguments) {
		differs = append(differs, "other toolArguments")
	}
	if len(differs) > 0 {
		return nil, fmt.Errorf("submit %s: %w: it was %s", id, ErrIdempotencyConflict, strings.Join(differs, ", "))
	}
	return e, nil
}

// SameJSON reports whether two JSON documents say the same, however spaced
// or ordered; an absent document is the empty object.
func SameJSON(a, b json.RawMessage) bool {
	var x, y any
	if len(a) == 0 {
		a = json.RawMessage("{}")
	}
	if len(b) == 0 {
		b = json.RawMessage("{}")
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

// Cancel stops a call that has not started running.
func (m *Machine) Cancel(ctx context.Context, pendingID, by, reason string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventCancel, by, reason, nil)
	if err != nil {
		return nil, fmt.Errorf("cancel %s: %w", pendingID, err)
	}
	return e, nil
}

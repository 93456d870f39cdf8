package machine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RerunSuffix ends the tool call id of a call run again (Rerun): the
// first call's, with it after.
const RerunSuffix = "-rerun"

// RerunRequest is a person's request to run a call again: who (By, and
// Identity when an OpenID provider signed them in), the groups their
// sign-in says they are in, and why.
type RerunRequest struct {
	By       string
	Identity *Identity
	Groups   []string
	Reason   string
}

// Rerun runs again, once, a call whose outcome is unknown
// (OutcomeUnknown: its executor was lost while the tool may have run),
// when r.By, a person who may decide it (named, or in one of r.Groups the
// call's approvers name), asks. Nothing else runs such a
// call again: the tool is not declared idempotent, or it had no attempt
// left.
//
// The answer is a new call, RerunOf the first: the same tool, arguments
// (as they ran), caller, conversation, team and task, scheduled to run at
// once, its creation their decision (DecidedByHuman, with the reason). Its
// tool call id is the first one's with RerunSuffix, so a call is run again
// at most once: asked again by them (an answer lost), Rerun answers the
// same new call; asked by anyone else, it refuses, naming who asked. The
// policy in force is asked first, as it would be of the call submitted
// again: a call it now denies is not run again. A call under a quorum is
// refused: one person cannot stand for its approvers.
func (m *Machine) Rerun(ctx context.Context, pendingID string, r RerunRequest) (*Entry, error) {
	by := r.By
	if by == "" {
		return nil, fmt.Errorf("rerun %s: %w", pendingID, invalidf("by is required"))
	}
	first, _, err := m.store.Get(ctx, pendingID)
	if err != nil {
		return nil, fmt.Errorf("rerun %s: %w", pendingID, err)
	}
	if first.Status != StateCompletedFailure || !first.OutcomeUnknown {
		return nil, fmt.Errorf("rerun %s: %w: only a call whose outcome is unknown is run again; it is %s", pendingID, ErrConflict, first.Status)
	}
	via, err := first.mayDecide(by, r.Groups)
	if err != nil {
		return nil, fmt.Errorf("rerun %s: %w", pendingID, err)
	}
	if first.Quorum != nil {
		return nil, fmt.Errorf("rerun %s: %w: it was approved by a quorum (%s), which one person cannot stand for: submit it again to ask them", pendingID, ErrForbidden, first.Needed())
	}
	c := first.Call()
	c.ToolCallID += RerunSuffix
	id := PendingID(c.ConversationID, c.ToolCallID)
	if existing, _, err := m.store.Get(ctx, id); err == nil {
		return rerunAgain(existing, by)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("rerun %s: %w", pendingID, err)
	}
	if ec, ok := m.eval.(EditChecker); ok {
		v, err := ec.EvaluateDry(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("rerun %s: policy: %w", pendingID, err)
		}
		if v.Action == ActionDeny {
			return nil, fmt.Errorf("rerun %s: %w: the policy in force denies it (%s)", pendingID, ErrForbidden, v.Reason)
		}
	}
	now := m.now()
	why := "run again, its outcome unknown, as " + by + " asked"
	if r.Reason != "" {
		why += ": " + r.Reason
	}
	e := &Entry{
		PendingID: id, ToolCallID: c.ToolCallID, ToolName: first.ToolName, ToolArguments: first.ToolArguments,
		ArgumentsDigest: first.ArgumentsDigest, PolicyRevision: first.PolicyRevision, Risk: first.Risk,
		CallerBotID: first.CallerBotID, ConversationID: first.ConversationID, RequestedAt: now.UnixMilli(),
		StatusReason: why, Team: first.Team, TaskID: first.TaskID, EstimatedCost: first.EstimatedCost,
		Currency: first.Currency, PermissionMode: first.PermissionMode, Description: first.Description,
		MaxExecutionAttempts: first.MaxExecutionAttempts, Idempotent: first.Idempotent, RerunOf: first.PendingID,
		ScheduledExecutionTime: now.UnixMilli(), ApprovedOrRejectedByUserID: by, DeciderIdentity: r.Identity, DeciderViaGroup: via, DecisionTime: now.UnixMilli(),
		Status: StateScheduled, DecidedBy: DecidedByHuman,
	}
	e.LastTransition = &Transition{Event: EventSchedule, To: e.Status, Actor: by, Reason: why, DecidedBy: DecidedByHuman, Identity: r.Identity,
		ViaGroup: via, At: now.UnixMilli(), Write: writeID()}
	if err := m.seal(e); err != nil {
		return nil, fmt.Errorf("rerun %s: %w", pendingID, err)
	}
	if _, err := m.store.Create(ctx, e); errors.Is(err, ErrExists) {
		existing, _, err := m.store.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("rerun %s: %w", pendingID, err)
		}
		return rerunAgain(existing, by)
	} else if err != nil {
		return nil, fmt.Errorf("rerun %s: %w", pendingID, err)
	}
	m.observe(ctx, e)
	return e, nil
}

// rerunAgain answers a rerun asked when the call was run again already:
// the new call, to the person who asked for it; a refusal naming them to
// anyone else.
func rerunAgain(e *Entry, by string) (*Entry, error) {
	if e.ApprovedOrRejectedByUserID == by {
		return e, nil
	}
	return nil, fmt.Errorf("rerun %s: %w: %s ran it again already, as %s, at %s", e.RerunOf, ErrConflict,
		e.ApprovedOrRejectedByUserID, e.PendingID, time.UnixMilli(e.DecisionTime).UTC().Format(time.RFC3339))
}

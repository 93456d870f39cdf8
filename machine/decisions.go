package machine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Decision is a human's answer to a pending call.
type Decision struct {
	Approve bool
	By      string // the user deciding
	Reason  string
	// Scope of an approval; empty means once.
	Scope Scope
	// Arguments, when set on an approval, replace the call's arguments;
	// the original ones are kept in OriginalArguments.
	Arguments json.RawMessage
	// For bounds the grant a session or always approval records: it
	// expires this long after the decision (0: until revoked).
	For time.Duration
	// PersistRule writes an always approval into the team's policy as an
	// allow rule instead of recording a grant (only an admin may ask).
	PersistRule bool
	// SingleUse makes the grant a session or always approval records
	// good for one call.
	SingleUse bool
	// GrantMatch narrows that grant to the later calls whose argument it
	// covers (wire.DecideRequest.GrantMatch); the application layer
	// records grants, the machine only checks it comes with a scope.
	GrantMatch string
	// Identity is who By is at the OpenID provider that signed them in,
	// when they decide signed in so: recorded with the decision.
	Identity *Identity
	// Groups are the groups By is in, as their sign-in says (the
	// provider's claim, the token file): an entry group:NAME of the
	// call's approvers admits them when NAME is one. Never the
	// policy's to say.
	Groups []string
	// DecidedBy is what decided, when not a human approver (the default):
	// an agent's classifier or a channel relaying its own prompt.
	DecidedBy Decider
	// RequestID, when set, is the decision's write id (Transition.Write)
	// whatever the times it is sent, so that one sent again after its
	// answer was lost can tell the write it made (Entry.WrittenBy).
	RequestID string
	// Claim, when set, is the executor an approval that makes the call
	// runnable at once claims it for, in the same write.
	Claim *Claimant

	// Result, when set, answers the call with the tool's result instead
	// of deciding whether it runs (a respondable call's, decisions.go):
	// the call ends COMPLETED_SUCCESS with it, and never runs.
	Result json.RawMessage
	// Interrupt, on a rejection, asks the agent to stop its turn, not
	// only this call.
	Interrupt bool
}

// Decide approves or rejects a pending call. Only the call's named approver,
// if it has one, may decide, and never the agent that asked.
func (m *Machine) Decide(ctx context.Context, pendingID string, d Decision) (*Entry, error) {
	if d.By == "" {
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("by: who decides is required"))
	}
	ev := EventReject
	if d.Approve {
		ev = EventApprove
	}
	if !validRequestID(d.RequestID) {
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("requestId: at most 64 letters, digits, '-' or '_', got %q", d.RequestID))
	}
	switch d.DecidedBy {
	case "", DecidedByHuman, DecidedByClassifier, DecidedByChannel, DecidedByReviewer:
	default:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("decidedBy: a human, a classifier, a channel or a reviewer decides, got %q", d.DecidedBy))
	}
	// A reviewer's decision settles the call or is refused: it is no
	// vote of a quorum, and no approver list names it (mayReview).
	reviewer := d.DecidedBy == DecidedByReviewer
	switch d.Scope {
	case "", ScopeOnce, ScopeTask, ScopeSession, ScopeAlways:
	default:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("scope: must be once, task, session or always, got %q", d.Scope))
	}
	switch {
	case d.For < 0:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("for: must be positive, got %v", d.For))
	case d.For > 0 && (d.Scope == "" || d.Scope == ScopeOnce):
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("for: bounds a task, session or always grant; scope %s records none", cmp.Or(d.Scope, ScopeOnce)))
	case d.PersistRule && d.Scope != ScopeAlways:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("persistRule: writes an always approval into the policy; scope is %s", cmp.Or(d.Scope, ScopeOnce)))
	case d.GrantMatch != "" && (d.Scope == "" || d.Scope == ScopeOnce):
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("grantMatch: narrows a task, session or always grant; scope %s records none", cmp.Or(d.Scope, ScopeOnce)))
	case d.SingleUse && (d.Scope == "" || d.Scope == ScopeOnce || d.PersistRule):
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("singleUse: makes a task, session or always grant good for one call; scope %s records none", cmp.Or(d.Scope, ScopeOnce)))
	case d.PersistRule && d.For > 0:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("persistRule: a rule in the policy has no expiry; leave out for"))
	}
	if err := d.checkAnswer(); err != nil {
		return nil, fmt.Errorf("decide %s: %w", pendingID, err)
	}
	if len(d.Result) > 0 {
		ev = EventRespond
	}
	if len(d.Arguments) > 0 {
		if !d.Approve {
			return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("arguments: only an approval may edit them"))
		}
		if err := validArguments(d.Arguments); err != nil {
			return nil, fmt.Errorf("decide %s: %w", pendingID, err)
		}
	}
	// Under a quorum, a decision that does not settle the call is a vote.
	choose := func(cur *Entry) (Event, string) {
		if ev == EventRespond || reviewer || cur.Settles(d.Approve) {
			return ev, d.Reason
		}
		return EventVote, d.Reason
	}
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, choose, d.By, func(e *Entry, now time.Time) error {
		if reviewer {
			if err := e.mayReview(d); err != nil {
				return err
			}
		} else {
			via, err := e.mayDecide(d.By, d.Groups)
			if err != nil {
				return err
			}
			e.LastTransition.ViaGroup = via
		}
		if d.RequestID != "" {
			e.LastTransition.Write = d.RequestID
		}
		e.LastTransition.Identity = d.Identity
		if d.Scope == ScopeTask && e.TaskID == "" {
			return invalidf("scope task: the call names no task (it was submitted without a taskId)")
		}
		// A decision after the deadline of a call its policy rejects then
		// is refused, timer or no timer: the agent may already have been
		// told it timed out, or is about to be.
		if e.decidedAtDeadline() && e.ApprovalTimeoutAt > 0 && now.UnixMilli() >= e.ApprovalTimeoutAt {
			return fmt.Errorf("%w at %s", ErrExpired, time.UnixMilli(e.ApprovalTimeoutAt).UTC().Format(time.RFC3339))
		}
		if e.LastTransition.Event == EventRespond {
			return e.respond(d, now)
		}
		if e.Quorum != nil && !reviewer {
			if err := e.castVote(d, now); err != nil {
				return err
			}
			if e.LastTransition.Event == EventVote {
				return nil // pending still: nobody has decided the call yet
			}
		}
		e.ApprovedOrRejectedByUserID, e.DeciderIdentity, e.DeciderViaGroup = d.By, d.Identity, e.LastTransition.ViaGroup
		e.DecisionTime = now.UnixMilli()
		e.LastTransition.DecidedBy = cmp.Or(d.DecidedBy, DecidedByHuman)
		if e.Quorum != nil && d.Approve {
			e.LastTransition.DecidedBy = DecidedByQuorum
		}
		if d.Approve {
			e.DecisionScope = cmp.Or(d.Scope, ScopeOnce)
		}
		if d.Interrupt && e.LastTransition.Event == EventReject {
			e.Interrupt, e.LastTransition.Interrupt = true, true
		}
		if len(d.Arguments) > 0 {
			risk, description, err := m.checkEdit(ctx, e, d)
			if err != nil {
				return err
			}
			// The entry describes the call that runs: the edited one's risk
			// and description.
			e.Risk, e.Description = risk, description
			if e.OriginalArguments == nil {
				e.OriginalArguments = e.ToolArguments
			}
			e.ToolArguments = d.Arguments
			e.ArgumentsDigest = ArgumentsDigest(d.Arguments)
			e.LastTransition.Edit = e.Edited()
		}
		return nil
	}, d.Claim)
	if err != nil {
		return nil, fmt.Errorf("decide %s: %w", pendingID, err)
	}
	return e, nil
}

// checkEdit asks the policy what the call e would need with the edited
// arguments of d: one a deny rule matches (or whose tool may not be
// edited) is refused, and one that would be asked about needs an approver
// its policy names, as the call submitted so would. It returns the
// edited call's risk and description. Without an EditChecker, it returns
// the entry's risk as it was and no description: the one the entry has
// tells of the arguments before the edit.
func (m *Machine) checkEdit(ctx context.Context, e *Entry, d Decision) (Risk, string, error) {
	ec, ok := m.eval.(EditChecker)
	if !ok {
		return e.Risk, "", nil
	}
	c := e.Call()
	c.Arguments = d.Arguments
	v, err := ec.CheckEdit(ctx, c)
	if err != nil {
		return "", "", err
	}
	_, admitted := admits(v.Approvers, d.By, d.Groups)
	switch {
	case v.Action == ActionDeny:
		return "", "", fmt.Errorf("%w: the edited call is denied by %s", ErrEditDenied, v.Reason)
	case v.Action != ActionAsk:
	case v.Approver != "" && v.Approver != d.By:
		return "", "", fmt.Errorf("%w: the edited call may be approved only by %s, not %s (%s)", ErrForbidden, v.Approver, d.By, v.Reason)
	case len(v.Approvers) > 0 && !admitted:
		return "", "", fmt.Errorf("%w: the edited call may be approved only by one of %v, not %s (%s)", ErrForbidden, v.Approvers, d.By, v.Reason)
	}
	return v.Risk, v.Description, nil
}

// The decisions beside approve and reject: what the timer does at a
// call's deadline (TimeoutOutcome), an approver's answer with the tool's
// result instead of running it (Decision.Result), and a rejection that
// asks the agent to stop its turn (Decision.Interrupt).

// TimeoutOutcome is what the timer does with a call nobody decided by
// its deadline, as the policy's onTimeout says.
type TimeoutOutcome string

// The outcomes a policy may give a timeout.
const (
	TimeoutReject  TimeoutOutcome = "reject"  // REJECTED_BY_TIMEOUT
	TimeoutCancel  TimeoutOutcome = "cancel"  // CANCELLED_BY_SYSTEM
	TimeoutApprove TimeoutOutcome = "approve" // APPROVED_READY_FOR_EXECUTION, where it may be (timeoutApproval)
)

// TimeoutOutcomes are every TimeoutOutcome.
var TimeoutOutcomes = []TimeoutOutcome{TimeoutReject, TimeoutCancel, TimeoutApprove}

// Valid reports whether o is one of TimeoutOutcomes.
func (o TimeoutOutcome) Valid() bool {
	return o == TimeoutReject || o == TimeoutCancel || o == TimeoutApprove
}

// timeoutOutcome is what the entry of an asked call records of v's
// onTimeout: cancel or approve; a rejection is AutoRejectOnTimeout's.
func (v Verdict) timeoutOutcome() TimeoutOutcome {
	if v.OnTimeout == TimeoutReject {
		return ""
	}
	return v.OnTimeout
}

// decidedAtDeadline reports whether the timer decides e at its deadline
// (rejects, cancels or approves it), rather than only flagging it: a
// human's decision after the deadline is then refused.
func (e *Entry) decidedAtDeadline() bool { return e.AutoRejectOnTimeout || e.OnTimeout != "" }

// MaxResponse is the most bytes of JSON an approver's result may hold
// (Decision.Result): an executor's error's bound. It is stored in the
// entry, and handed to the agent's model as the tool's result.
const MaxResponse = 64 << 10

// checkAnswer checks what d asks beside approve or reject: a result
// answers the call and nothing else, and only a rejection interrupts.
func (d Decision) checkAnswer() error {
	if d.Interrupt && (d.Approve || len(d.Result) > 0) {
		return invalidf("interrupt: only a rejection asks the agent to stop its turn")
	}
	if len(d.Result) == 0 {
		return nil
	}
	switch {
	case d.Approve:
		return invalidf("result: answers the call instead of approving it; leave out approved")
	case len(d.Arguments) > 0 || (d.Scope != "" && d.Scope != ScopeOnce) || d.For != 0 || d.PersistRule || d.SingleUse || d.GrantMatch != "":
		return invalidf("result: answers this one call; leave out arguments, scope, for, persistRule, singleUse and grantMatch")
	case d.DecidedBy != "" && d.DecidedBy != DecidedByHuman:
		return invalidf("result: only a human approver supplies a result, not a %s", d.DecidedBy)
	case len(d.Result) > MaxResponse:
		return invalidf("result: at most %d bytes of JSON, got %d", MaxResponse, len(d.Result))
	case !json.Valid(d.Result):
		return invalidf("result: not valid JSON")
	}
	return nil
}

// respond is a respond's change of e, the pending call d answers: its
// result is d's, recorded as supplied by d.By.
func (e *Entry) respond(d Decision, now time.Time) error {
	switch {
	case !e.Respondable:
		return fmt.Errorf("%w: %s (%s) is not respondable: its policy does not list the tool under respondable, so its calls are approved or rejected, and run by an executor", ErrForbidden, e.PendingID, e.ToolName)
	case e.Quorum != nil:
		return fmt.Errorf("%w: %s is under a quorum (%s): it is decided by approvals, not answered by one approver", ErrForbidden, e.PendingID, e.Needed())
	}
	e.Result = d.Result
	e.RespondedBy = d.By
	e.ApprovedOrRejectedByUserID, e.DeciderIdentity, e.DeciderViaGroup = d.By, d.Identity, e.LastTransition.ViaGroup
	e.DecisionTime = now.UnixMilli()
	e.LastTransition.DecidedBy = DecidedByHuman
	return nil
}

// timeoutApproval says why the timer may not approve e at its deadline,
// though its onTimeout says approve, or "" when it may: never a call
// under a quorum or of high risk, and never one the policy in force
// would not approve so now (a deny rule matches it, or its onTimeout
// says otherwise). When the policy cannot tell, it may not: a gate that
// cannot decide does not let a call run.
func (m *Machine) timeoutApproval(ctx context.Context, e *Entry) string {
	switch {
	case e.Quorum != nil:
		return "the call is under a quorum (" + e.Needed() + ")"
	case e.Risk == RiskHigh:
		return "the call's risk is high"
	}
	ec, ok := m.eval.(EditChecker)
	if !ok {
		return "no policy can confirm it"
	}
	v, err := ec.EvaluateDry(ctx, e.Call())
	switch {
	case err != nil:
		return "the policy could not be read (" + err.Error() + ")"
	case v.Action == ActionDeny:
		return "the policy denies the call now (" + v.Reason + ")"
	case v.Action == ActionAsk && v.OnTimeout != TimeoutApprove:
		return "the policy in force no longer says onTimeout approve for it"
	case v.Quorum != nil:
		return "the call is under a quorum now"
	case v.Risk == RiskHigh:
		return "the call's risk is high now"
	}
	return ""
}

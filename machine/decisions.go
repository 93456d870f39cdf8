package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

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
	case len(d.Arguments) > 0 || (d.Scope != "" && d.Scope != ScopeOnce) || d.For != 0 || d.PersistRule || d.SingleUse:
		return invalidf("result: answers this one call; leave out arguments, scope, for, persistRule and singleUse")
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
	e.ApprovedOrRejectedByUserID = d.By
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

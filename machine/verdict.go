package machine

import (
	"context"
	"slices"
	"time"
)

// Action is what a policy says to do with a call.
type Action string

// The actions a Verdict may carry.
const (
	ActionRun  Action = "run"  // run now, or after Delay
	ActionAsk  Action = "ask"  // a human decides
	ActionDeny Action = "deny" // never run
)

// Verdict is a policy's answer for one call, with the rule or field that
// decided it in Reason.
type Verdict struct {
	Action              Action
	Delay               time.Duration // ActionRun: wait this long first
	ApprovalTimeout     time.Duration // ActionAsk: reject (or flag) after this long
	AutoRejectOnTimeout bool          // ActionAsk: reject at the timeout, else only flag it
	// ApprovalReminder (ActionAsk) is how long after the call is asked its
	// approvers are reminded of it, if nobody decided; 0: never.
	ApprovalReminder time.Duration
	Approver         string   // ActionAsk: the only user who may decide, if set
	Approvers        []string // ActionAsk: the users who may decide, if set
	// Quorum (ActionAsk), when set, is how many distinct approvals the
	// call needs; Escalate, the tiers that widen who may decide it while
	// nobody has.
	Quorum   *Quorum
	Escalate []EscalationTier
	// MaxExecutionAttempts bounds how often the call is claimed; 0: default.
	MaxExecutionAttempts int
	// Idempotent says the call's tool may run twice without harm: a call
	// whose executor is lost is then run again by another executor.
	Idempotent bool
	// Description is one human sentence saying what the call will do.
	Description string
	// Reason names the rule or field that decided; DecidedBy, what kind
	// of thing it is (DecidedByRule, DecidedByGrant or DecidedByPolicy,
	// the default).
	Reason    string
	DecidedBy Decider
	// CostReserved is what the policy reserved of the team's daily budget,
	// on CostDay (UTC, 2006-01-02), for the call.
	CostReserved float64
	CostDay      string
	// PolicyRevision is the revision of the stored policy that decided
	// (0 when the policy was not read from the bucket).
	PolicyRevision uint64
	// Risk is what the policy says of the call's risk, for the approver
	// to see first ("" when it says nothing).
	Risk Risk

	// OnTimeout (ActionAsk) is what the timer does with the call at its
	// deadline when the policy says more than AutoRejectOnTimeout: cancel
	// it, or approve it. "" (or reject): as AutoRejectOnTimeout says.
	OnTimeout TimeoutOutcome
	// Respondable (ActionAsk) lets an approver answer the call with the
	// tool's result instead of running it (Decision.Result).
	Respondable bool
	// NotEditable (ActionAsk): no approver may edit the call's arguments.
	NotEditable bool
	// Currency is the code the call's costs are counted in, if named.
	Currency string
	// OverCostLimit says the call's estimated cost is above the policy's
	// threshold for asking (requireApprovalAboveCost), whatever asked.
	OverCostLimit bool
}

// Risk is how risky a policy says a call is: high, medium or low.
type Risk string

// The risks a policy may attach to a call.
const (
	RiskHigh   Risk = "high"
	RiskMedium Risk = "medium"
	RiskLow    Risk = "low"
)

// Risks are the risks, highest first.
var Risks = []Risk{RiskHigh, RiskMedium, RiskLow}

// Valid reports whether r is one of Risks.
func (r Risk) Valid() bool { return slices.Contains(Risks, r) }

// Rank orders risks: high 3, medium 2, low 1, anything else 0.
func (r Risk) Rank() int {
	if i := slices.Index(Risks, r); i >= 0 {
		return len(Risks) - i
	}
	return 0
}

// Evaluator decides what a call needs. policy.Engine is the real one.
type Evaluator interface {
	Evaluate(ctx context.Context, c Call) (Verdict, error)
}

// EditChecker is an Evaluator that can also say what a call would need,
// as a submission of it would be evaluated, while changing nothing (no
// budget reserved, no grant used): EvaluateDry for the call as it is, and
// CheckEdit with an approver's edited arguments (which a tool may also
// forbid). A Machine whose Evaluator is one checks every edit on
// approval, and tells an agent whose call timed out what a resubmit would
// meet.
type EditChecker interface {
	EvaluateDry(ctx context.Context, c Call) (Verdict, error)
	CheckEdit(ctx context.Context, c Call) (Verdict, error)
}

// EvaluatorFunc adapts a function to Evaluator.
type EvaluatorFunc func(ctx context.Context, c Call) (Verdict, error)

// Evaluate calls f.
func (f EvaluatorFunc) Evaluate(ctx context.Context, c Call) (Verdict, error) { return f(ctx, c) }

// DefaultApprovalTimeout is how long a call waits for a human when the
// policy does not say.
const DefaultApprovalTimeout = 5 * time.Minute

// AskEverything is the evaluator used when none is configured: the safe
// answer is to ask a human about every call.
var AskEverything = EvaluatorFunc(func(context.Context, Call) (Verdict, error) {
	return Verdict{
		Action:              ActionAsk,
		ApprovalTimeout:     DefaultApprovalTimeout,
		AutoRejectOnTimeout: true,
		Reason:              "no policy configured: every call asks",
	}, nil
})

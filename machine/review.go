package machine

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// ReviewerPrefix starts the name an automated reviewer acts under:
// reviewer:<name>, the name the policy gives it. No credential's name
// holds a ':', so no person or agent acts under it.
const ReviewerPrefix = "reviewer:"

// The answers an automated reviewer gives.
const (
	ReviewApprove  = "approve"  // run it
	ReviewReject   = "reject"   // refuse it
	ReviewEscalate = "escalate" // leave it to humans, saying so
	ReviewAbstain  = "abstain"  // no opinion: left to humans, nothing recorded
)

// Review is what an automated reviewer said of a call that it left to
// humans (Entry.Reviews): it escalated, or it approved a call it may not
// approve, and the approval was refused (Refused says why).
type Review struct {
	// By is the reviewer, reviewer:<name>.
	By string `json:"by"`
	// Answer is ReviewEscalate, or ReviewApprove when refused.
	Answer string `json:"answer"`
	// Lean is what the reviewer would have decided, when it says
	// (ReviewApprove or ReviewReject; a refused approval leans to
	// approve): a human deciding the other way overrules it.
	Lean   string `json:"lean,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Refused says why an approval was refused.
	Refused string `json:"refused,omitempty"`
	At      int64  `json:"at"`
}

// Review records a reviewer's review of a pending call that leaves the
// call to humans: an EventReview, PENDING_APPROVAL to itself. r.By must
// be a reviewer's name (ReviewerPrefix).
func (m *Machine) Review(ctx context.Context, pendingID string, r Review) (*Entry, error) {
	if !strings.HasPrefix(r.By, ReviewerPrefix) || len(r.By) == len(ReviewerPrefix) {
		return nil, fmt.Errorf("review %s: %w", pendingID, invalidf("by: a reviewer acts as %s<name>, got %q", ReviewerPrefix, r.By))
	}
	switch {
	case r.Answer != ReviewEscalate && r.Answer != ReviewApprove:
		return nil, fmt.Errorf("review %s: %w", pendingID, invalidf("answer: a review that leaves a call to humans is escalate, or a refused approve, got %q", r.Answer))
	case r.Lean != "" && r.Lean != ReviewApprove && r.Lean != ReviewReject:
		return nil, fmt.Errorf("review %s: %w", pendingID, invalidf("lean: approve or reject, got %q", r.Lean))
	}
	reason := r.Answer
	if r.Refused != "" {
		reason += " refused: " + r.Refused
	}
	if r.Reason != "" {
		reason += " (" + r.Reason + ")"
	}
	e, err := m.transition(ctx, pendingID, EventReview, r.By, reason, func(e *Entry, now time.Time) error {
		r.At = now.UnixMilli()
		e.Reviews = append(e.Reviews, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("review %s: %w", pendingID, err)
	}
	return e, nil
}

// mayReview says whether the reviewer of d (DecidedByReviewer) may make
// d's decision on e: no approver list names it and it is no agent (no
// agent's name holds a ':'); it may reject any call, and approve
// only once, as submitted, a call no quorum and no high risk reserve for
// humans. Whether its policy lets it approve the call at all (its
// mayApprove, the deny rules) is for its caller to say.
func (e *Entry) mayReview(d Decision) error {
	switch {
	case !strings.HasPrefix(d.By, ReviewerPrefix):
		return invalidf("by: a reviewer acts as %s<name>, got %q", ReviewerPrefix, d.By)
	case d.Scope != "" && d.Scope != ScopeOnce, d.PersistRule, len(d.Arguments) > 0, len(d.Result) > 0, d.Interrupt:
		return fmt.Errorf("%w: a reviewer decides the one call as submitted: no grant, rule, edit, result or interrupt", ErrForbidden)
	case !d.Approve:
		return nil
	case e.Quorum != nil:
		return fmt.Errorf("%w: a quorum of %d approvers reserves this call for humans", ErrForbidden, e.Quorum.Required)
	case e.Risk == RiskHigh:
		return fmt.Errorf("%w: its high risk reserves this call for humans", ErrForbidden)
	}
	return nil
}

package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Reviewer is toolgate's own reviewer role (package worker's Reviewer,
// run by `serve`): the one actor that may hand the application layer an
// automated reviewer's answer (Review) and read a call as a reviewer is
// sent it (ReviewCall). It holds no role, so it may do nothing else; no
// transport builds it, so no credential (an agent's, an approver's) can
// pose as a reviewer. Its decisions are recorded as reviewer:<name>.
var Reviewer = Actor{Name: "toolgate-reviewer", reviewer: true}

// ErrNotReviewed is a call the named reviewer does not review: the call's
// policy names no such reviewer, or its match does not cover the call.
var ErrNotReviewed = fmt.Errorf("%w: not a call this reviewer reviews", machine.ErrForbidden)

// mayReview refuses the reviewer use cases to every actor but the
// reviewer role and toolgate itself.
func (a Actor) mayReview(what string) error {
	if a.reviewer || a.system {
		return nil
	}
	return fmt.Errorf("%w: %s may not %s: only toolgate's own reviewer role does", machine.ErrForbidden, cmp.Or(a.Name, "nobody"), what)
}

// ReviewCall is what the reviewer r.Reviewer is sent about the call
// r.PendingID: the call as an approver sees it (secrets masked, no
// receipts), and the conversation's latest other calls, masked too
// (wire.MaxReviewRecent, newest first). A call no longer pending, or one
// the reviewer does not review (ErrNotReviewed), is refused.
func (s *Service) ReviewCall(ctx context.Context, a Actor, r wire.ReviewCallRequest) (*wire.ReviewRequest, error) {
	if err := a.mayReview("read calls for review"); err != nil {
		return nil, err
	}
	e, _, _, err := s.reviewing(ctx, r.PendingID, r.Reviewer)
	if err != nil {
		return nil, err
	}
	recent, err := s.calls.ListConversation(ctx, e.ConversationID)
	if err != nil {
		return nil, fmt.Errorf("the conversation's calls: %w", err)
	}
	recent = slices.DeleteFunc(recent, func(o *machine.Entry) bool { return o.PendingID == e.PendingID })
	slices.SortFunc(recent, func(x, y *machine.Entry) int { return cmp.Compare(y.RequestedAt, x.RequestedAt) })
	recent = recent[:min(len(recent), wire.MaxReviewRecent)]
	shown := func(e *machine.Entry) *machine.Entry {
		c := s.mask(e)
		c.Receipts = nil
		return c
	}
	req := &wire.ReviewRequest{V: wire.ReviewVersion, Reviewer: r.Reviewer, Call: shown(e), Recent: make([]*machine.Entry, len(recent))}
	for i, o := range recent {
		req.Recent[i] = shown(o)
	}
	return req, nil
}

// Review hands the application layer a reviewer's answer on a pending
// call. The reviewer only narrows:
//
//   - approve: only a call its mayApprove covers (as an allow rule
//     would), that the policy in force does not deny, and that neither a
//     quorum nor a high risk reserves for humans (now, or when it was
//     asked); the call is approved once, as submitted, decided by
//     reviewer:<name>. Any other approval is refused: recorded on the
//     call as a review (tool.approval_reviewed) and left to humans.
//   - reject: the call is rejected, decided by reviewer:<name>.
//   - escalate: recorded as a review, the call left to humans.
//   - abstain: nothing recorded; the call is the humans'.
//
// Only the reviewer role may answer (Reviewer), and only as a reviewer
// the call's policy names whose match covers the call.
func (s *Service) Review(ctx context.Context, a Actor, r wire.ReviewDecision) (*wire.ReviewReply, error) {
	if err := a.mayReview("decide as a reviewer"); err != nil {
		return nil, err
	}
	if err := r.Answer.Check(); err != nil {
		return nil, err
	}
	e, res, rv, err := s.reviewing(ctx, r.PendingID, r.Reviewer)
	if err != nil {
		return nil, err
	}
	by := machine.ReviewerPrefix + rv.Name
	ans := r.Answer
	reply := func(outcome, refused string, e *machine.Entry, err error) (*wire.ReviewReply, error) {
		if err != nil {
			return nil, s.shownErr(a, err)
		}
		return &wire.ReviewReply{Outcome: outcome, Refused: refused, Entry: s.shown(a, e)}, nil
	}
	switch ans.Decision {
	case machine.ReviewAbstain:
		return &wire.ReviewReply{Outcome: wire.ReviewAbstained}, nil
	case machine.ReviewEscalate:
		got, err := s.observe(s.m.Review(ctx, e.PendingID, machine.Review{By: by, Answer: machine.ReviewEscalate, Lean: ans.Lean, Reason: ans.Reason}))
		return reply(wire.ReviewEscalated, "", got, err)
	case machine.ReviewReject:
		got, err := s.observe(s.m.Decide(ctx, e.PendingID, machine.Decision{By: by, Reason: ans.Reason, DecidedBy: machine.DecidedByReviewer}))
		return reply(wire.ReviewRejected, "", got, err)
	}
	if why := s.reservedForHumans(ctx, e, res, rv); why != "" {
		got, err := s.observe(s.m.Review(ctx, e.PendingID, machine.Review{By: by, Answer: machine.ReviewApprove, Lean: machine.ReviewApprove, Reason: ans.Reason, Refused: why}))
		return reply(wire.ReviewRefused, why, got, err)
	}
	c := s.claimer(s.toolOf(ctx, e.PendingID))
	got, err := s.observe(s.m.Decide(ctx, e.PendingID, machine.Decision{
		Approve: true, By: by, Reason: ans.Reason, DecidedBy: machine.DecidedByReviewer, Claim: c.claimant(),
	}))
	c.settle(got, err == nil)
	if errors.Is(err, machine.ErrForbidden) {
		// The machine's own check (a quorum, a high risk on the entry):
		// refused as any approval beyond the reviewer's reach is.
		why := err.Error()
		got, err := s.observe(s.m.Review(ctx, e.PendingID, machine.Review{By: by, Answer: machine.ReviewApprove, Lean: machine.ReviewApprove, Reason: ans.Reason, Refused: why}))
		return reply(wire.ReviewRefused, why, got, err)
	}
	return reply(wire.ReviewApproved, "", got, err)
}

// reviewing reads the pending call pendingID, and the policy in force
// for it and its reviewer named name, which must review it (its match
// covers the call), or ErrNotReviewed.
func (s *Service) reviewing(ctx context.Context, pendingID, name string) (*machine.Entry, *policy.Resolved, policy.CompiledReviewer, error) {
	var none policy.CompiledReviewer
	if err := required("pendingId", pendingID); err != nil {
		return nil, nil, none, err
	}
	if err := required("reviewer", name); err != nil {
		return nil, nil, none, err
	}
	e, _, err := s.calls.Get(ctx, pendingID)
	if err != nil {
		return nil, nil, none, err
	}
	if e.Status != machine.StatePendingApproval {
		return nil, nil, none, &machine.TransitionError{Event: machine.EventReview, Entry: s.mask(e)}
	}
	if s.limits == nil {
		return nil, nil, none, fmt.Errorf("%w: this toolgate has no policy, so no reviewers", ErrNotReviewed)
	}
	res := s.limits.Resolve(e.Team, e.ConversationID)
	rv, ok := res.Reviewer(name)
	if !ok {
		return nil, nil, none, fmt.Errorf("%w: the call's policy names no reviewer %.64q", ErrNotReviewed, name)
	}
	if !res.Reviews(rv, e.ToolName, e.ToolArguments) {
		return nil, nil, none, fmt.Errorf("%w: %s's match does not cover %s", ErrNotReviewed, name, e.ToolName)
	}
	return e, &res, rv, nil
}

// reservedForHumans says why the reviewer rv may not approve e, or ""
// when it may: its mayApprove does not cover the call, the policy in
// force denies it, or a quorum or a high risk reserves it for humans.
// The policy is asked as a submit of the call would ask it, changing
// nothing; a policy that cannot answer reserves the call too.
func (s *Service) reservedForHumans(ctx context.Context, e *machine.Entry, res *policy.Resolved, rv policy.CompiledReviewer) string {
	if _, ok := res.MayApprove(rv, e.ToolName, e.ToolArguments); !ok {
		return fmt.Sprintf("%s's mayApprove does not cover it", rv.Name)
	}
	switch {
	case e.Quorum != nil:
		return fmt.Sprintf("a quorum of %d approvers reserves it for humans", e.Quorum.Required)
	case e.Risk == machine.RiskHigh:
		return "its high risk reserves it for humans"
	}
	dry, ok := s.limits.(machine.EditChecker)
	if !ok {
		return "no policy can say that no deny rule covers it"
	}
	v, err := dry.EvaluateDry(ctx, e.Call())
	switch {
	case err != nil:
		return "the policy could not be asked: " + err.Error()
	case v.Action == machine.ActionDeny:
		return "the policy denies it: " + v.Reason
	case v.Quorum != nil:
		return fmt.Sprintf("a quorum of %d approvers reserves it for humans", v.Quorum.Required)
	case v.Risk == machine.RiskHigh:
		return "its high risk reserves it for humans"
	}
	return ""
}

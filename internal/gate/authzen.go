package gate

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Evaluate answers an OpenID AuthZEN Access Evaluation: may the subject,
// an agent, run the call the action and resource name, now?
//
// The call is submitted as the agent's submit would submit it, so the
// policy, its grants, budgets and rate limits decide it as they decide
// any call, and it is on record. The decision is true only of a call
// toolgate lets run now (allowed, granted, or approved with exactly
// these arguments, and still not denied by the policy in force), and the
// call is then handed to the caller to run: claimed in its name, under
// the lease an agent's own claim gets (an hour), so that no executor
// runs it too and an approval is good for one evaluation. The caller may
// report the run's outcome as an agent reports its own (succeeded,
// failed); a call whose outcome is never reported ends, when its lease
// runs out, with its outcome unknown.
//
// A call that needs a human is answered false, the context naming the
// pending call, its deadline, where to follow it and the binding its
// approval carries; the same evaluation once the call is approved is
// true, once. An evaluation toolgate cannot decide is false, its context
// saying why (fail closed). A request without a subject, action or
// resource, or without their type, id or name, is invalid; one that
// names another subject than the caller is refused, unless the caller
// is an admin.
func (s *Service) Evaluate(ctx context.Context, a Actor, r wire.AccessEvaluationRequest) (wire.AccessDecision, error) {
	if err := a.mayEvaluate(r); err != nil {
		return wire.AccessDecision{}, err
	}
	return s.evaluate(ctx, a, r), nil
}

// Evaluations answers an AuthZEN Access Evaluations request: each
// evaluation, its subject, action, resource and context defaulting to
// the request's, evaluated as Evaluate does, in order, until the
// request's semantics stops (deny_on_first_deny after the first false,
// permit_on_first_permit after the first true; execute_all, the default,
// never). Every evaluation is checked before any is evaluated: one that
// Evaluate would refuse refuses the request. A request without
// evaluations is one evaluation of its defaults, answered as Evaluate
// answers it.
func (s *Service) Evaluations(ctx context.Context, a Actor, r wire.AccessEvaluationsRequest) (wire.AccessEvaluationsReply, error) {
	semantic := wire.ExecuteAll
	if r.Options != nil {
		semantic = cmp.Or(r.Options.EvaluationsSemantic, semantic)
	}
	switch semantic {
	case wire.ExecuteAll, wire.DenyOnFirstDeny, wire.PermitOnFirstPermit:
	default:
		return wire.AccessEvaluationsReply{}, fmt.Errorf("%w: options.evaluations_semantic: want %s, %s or %s, got %q",
			machine.ErrInvalid, wire.ExecuteAll, wire.DenyOnFirstDeny, wire.PermitOnFirstPermit, semantic)
	}
	if len(r.Evaluations) == 0 {
		d, err := s.Evaluate(ctx, a, r.AccessEvaluationRequest)
		if err != nil {
			return wire.AccessEvaluationsReply{}, err
		}
		return wire.AccessEvaluationsReply{Decision: &d.Decision, Context: d.Context}, nil
	}
	if n := len(r.Evaluations); n > wire.MaxEvaluations {
		return wire.AccessEvaluationsReply{}, fmt.Errorf("%w: evaluations: at most %d, got %d", machine.ErrInvalid, wire.MaxEvaluations, n)
	}
	evals := make([]wire.AccessEvaluationRequest, len(r.Evaluations))
	for i, e := range r.Evaluations {
		e.Subject = cmp.Or(e.Subject, r.Subject)
		e.Action = cmp.Or(e.Action, r.Action)
		e.Resource = cmp.Or(e.Resource, r.Resource)
		if e.Context == nil {
			e.Context = r.Context
		}
		if err := a.mayEvaluate(e); err != nil {
			return wire.AccessEvaluationsReply{}, fmt.Errorf("evaluations[%d]: %w", i, err)
		}
		evals[i] = e
	}
	reply := wire.AccessEvaluationsReply{Evaluations: make([]wire.AccessDecision, 0, len(evals))}
	for _, e := range evals {
		d := s.evaluate(ctx, a, e)
		reply.Evaluations = append(reply.Evaluations, d)
		if semantic == wire.DenyOnFirstDeny && !d.Decision || semantic == wire.PermitOnFirstPermit && d.Decision {
			break
		}
	}
	return reply, nil
}

// mayEvaluate refuses an evaluation that lacks what the specification
// requires (ErrInvalid), or that a may not ask: only an agent evaluates,
// and only as itself (an admin as any agent) (ErrForbidden).
func (a Actor) mayEvaluate(r wire.AccessEvaluationRequest) error {
	if err := a.require("evaluate calls", wire.RoleAgent); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		given bool
	}{
		{"subject", r.Subject != nil}, {"subject.type", r.Subject != nil && r.Subject.Type != ""}, {"subject.id", r.Subject != nil && r.Subject.ID != ""},
		{"action", r.Action != nil}, {"action.name", r.Action != nil && r.Action.Name != ""},
		{"resource", r.Resource != nil}, {"resource.type", r.Resource != nil && r.Resource.Type != ""}, {"resource.id", r.Resource != nil && r.Resource.ID != ""},
	} {
		if !f.given {
			return fmt.Errorf("%w: %s: required", machine.ErrInvalid, f.name)
		}
	}
	if r.Subject.ID != a.Name && !a.Can(wire.RoleAdmin) {
		return fmt.Errorf("%w: subject.id %q: %s evaluates calls as itself", machine.ErrForbidden, r.Subject.ID, a.Name)
	}
	return nil
}

// evaluate is Evaluate of an evaluation mayEvaluate let through: it
// never fails, a call it cannot decide is false.
func (s *Service) evaluate(ctx context.Context, a Actor, r wire.AccessEvaluationRequest) wire.AccessDecision {
	c, err := accessCall(r)
	if err != nil {
		return s.undecided(err)
	}
	holder := &machine.Claimant{Holder: a.holder(""), Lease: leaseOf(wire.ReportRequest{})}
	e, created, err := s.submitOnce(ctx, a, c, holder)
	switch {
	case errors.Is(err, machine.ErrIdempotencyConflict):
		return wire.AccessDecision{Context: &wire.AccessContext{Reason: wire.AccessOtherCall, Message: err.Error(),
			PendingID: machine.PendingID(c.ConversationID, c.ToolCallID)}}
	case err != nil:
		return s.undecided(err)
	case created:
		// Created claimed for the caller when the policy lets it run now.
		return s.decided(e, e.Status == machine.StateExecuting && e.Lease != nil && e.Lease.Holder == holder.Holder)
	}
	return s.handOut(ctx, a, e, holder)
}

// handOut answers an evaluation of a call submitted before (by an
// evaluation or a submit of the same id, same arguments): a call that
// may run now, with the arguments the caller asked about, is claimed
// for the caller. An approved one is asked of the policy in force first
// (Recheck), as the MCP gateway asks before it runs one: a deny rule
// added since the approval holds.
func (s *Service) handOut(ctx context.Context, a Actor, e *machine.Entry, holder *machine.Claimant) wire.AccessDecision {
	if !e.Runnable(s.now()) {
		return s.decided(e, false)
	}
	if e.OriginalArguments != nil && !machine.SameJSON(e.OriginalArguments, e.ToolArguments) {
		d := s.decided(e, false)
		d.Context.Reason = wire.AccessEdited
		d.Context.Message = fmt.Sprintf("approved by %s with its arguments edited (digest %s): it runs only as edited, not with these",
			e.ApprovedOrRejectedByUserID, e.ArgumentsDigest)
		return d
	}
	if e.ApprovedOrRejectedByUserID != "" {
		r, err := s.Recheck(ctx, a, wire.RecheckRequest{PendingID: e.PendingID})
		if err != nil {
			return s.undecided(fmt.Errorf("asking the policy in force again: %w", err))
		}
		if r.Denied != "" {
			d := s.decided(e, false)
			d.Context.Reason = wire.AccessPolicyDenied
			d.Context.Message = fmt.Sprintf("approved by %s, but the policy in force (revision %d) now denies it: %s", e.ApprovedOrRejectedByUserID, r.PolicyRevision, r.Denied)
			return d
		}
	}
	got, err := s.observe(s.m.Claim(ctx, e.PendingID, holder.Holder, holder.Lease))
	var te *machine.TransitionError
	switch {
	case errors.As(err, &te):
		return s.decided(te.Entry, false) // another evaluation, or an executor, took it first
	case err != nil:
		return s.undecided(err)
	}
	d := s.decided(got, true)
	d.Context.Message = e.StatusReason // the approval's reason, not the claim's
	return d
}

// accessCall is the call an evaluation asks about.
func accessCall(r wire.AccessEvaluationRequest) (machine.Call, error) {
	if r.Resource.Type != wire.AuthZENToolCall {
		return machine.Call{}, fmt.Errorf("%w: resource.type: toolgate decides tool calls (%s), got %q", machine.ErrInvalid, wire.AuthZENToolCall, r.Resource.Type)
	}
	var p wire.AuthZENCallProperties
	if props := bytes.TrimSpace(r.Resource.Properties); len(props) > 0 && !bytes.Equal(props, []byte("null")) {
		if err := wire.Unmarshal(props, &p); err != nil {
			return machine.Call{}, fmt.Errorf("%w: resource.properties: %v", machine.ErrInvalid, err)
		}
		if err := wire.CheckBounds(p); err != nil {
			return machine.Call{}, fmt.Errorf("resource.properties: %w", err)
		}
	}
	if len(p.Arguments) == 0 {
		p.Arguments = []byte("{}")
	}
	return machine.Call{
		ToolCallID: r.Resource.ID, ToolName: r.Action.Name, Arguments: p.Arguments, CallerBotID: r.Subject.ID,
		ConversationID: cmp.Or(p.ConversationID, wire.AuthZENConversation), Team: p.Team, TaskID: p.TaskID,
		EstimatedCost: p.EstimatedCost, PermissionMode: p.PermissionMode,
	}, nil
}

// decided is the decision on e: true when this evaluation handed it to
// its caller, else false, saying why.
func (s *Service) decided(e *machine.Entry, handed bool) wire.AccessDecision {
	c := &wire.AccessContext{
		Message: e.StatusReason, PendingID: e.PendingID, Status: e.Status,
		DecidedBy: cmp.Or(e.ApprovedOrRejectedByUserID, string(e.DecidedBy)),
		Binding:   &wire.AccessBinding{ArgumentsDigest: e.ArgumentsDigest, PolicyRevision: e.PolicyRevision},
		Follow:    &wire.AccessFollow{Subject: wire.EntrySubject(e.CallerBotID, e.PendingID)},
	}
	if handed {
		if e.PriorTransition != nil {
			c.Message = e.PriorTransition.Reason // the verdict the claim followed in the same write
		}
		switch {
		case e.DecidedBy == machine.DecidedByGrant:
			c.Reason = wire.AccessGranted
		case e.ApprovedOrRejectedByUserID != "":
			c.Reason = wire.AccessApproved
		default:
			c.Reason = wire.AccessAllowed
		}
		c.ExpiresAt = rfc3339(e.Lease.ExpiresAt)
		return wire.AccessDecision{Decision: true, Context: c}
	}
	switch e.Status {
	case machine.StatePendingApproval:
		c.Reason, c.ExpiresAt = wire.AccessApprovalRequired, rfc3339(e.ApprovalTimeoutAt)
	case machine.StateScheduled, machine.StateApproved:
		c.Reason, c.NotBefore = wire.AccessScheduled, rfc3339(e.ScheduledExecutionTime)
	case machine.StateRejectedByPolicy:
		c.Reason = wire.AccessPolicyDenied
	case machine.StateRejectedByUser:
		c.Reason = wire.AccessRejected
	case machine.StateRejectedByTimeout:
		c.Reason = wire.AccessExpired
	case machine.StateCancelled:
		c.Reason = wire.AccessCancelled
	default:
		c.Reason = wire.AccessConsumed
		c.Message = fmt.Sprintf("%s is %s: a call runs once; another run is another call (a new resource.id)", e.PendingID, e.Status)
	}
	return wire.AccessDecision{Context: c}
}

// undecided is the decision on a call toolgate could not decide: false,
// saying why.
func (s *Service) undecided(err error) wire.AccessDecision {
	status, _ := wire.ErrorStatus(err)
	msg := err.Error()
	if status == 500 {
		// The details are the server's, as an error answer's are.
		s.log.Error("an access evaluation failed", "err", err)
		msg = "internal error"
	}
	return wire.AccessDecision{Context: &wire.AccessContext{Reason: wire.AccessUndecided, Message: msg,
		Error: &wire.AccessError{Status: status, Message: msg}}}
}

// rfc3339 is epoch milliseconds as RFC 3339 ("" for 0).
func rfc3339(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

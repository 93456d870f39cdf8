package gate

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// recordScope records how far an approval reaches beyond its call: a
// session grant for the conversation, or an "always" grant for the team
// (both until revoked, or d.For), or with d.PersistRule an allow rule in
// the team's policy.
//
// Only an approval sets e.DecisionScope, and it stays set whatever
// happens to the call next: an approval that handed the call to a
// waiting executor in the same write left it executing, and one sent
// again after its answer was lost may find it finished.
func (s *Service) recordScope(ctx context.Context, e *machine.Entry, d machine.Decision) error {
	if !grants(e.DecisionScope) {
		return nil
	}
	g, err := s.grantOf(e, e.DecisionScope, d.GrantMatch)
	if err != nil {
		return err
	}
	if d.PersistRule {
		return s.policies.AddAllowRule(ctx, e.Team, g.Pattern)
	}
	g.By, g.At = e.ApprovedOrRejectedByUserID, e.DecisionTime
	if d.For > 0 {
		g.ExpiresAt = e.DecisionTime + d.For.Milliseconds()
	}
	g.SingleUse = d.SingleUse
	_, err = s.grants.Add(ctx, g, s.now())
	return err
}

// grants reports whether an approval with scope records a grant (or,
// with PersistRule, a rule).
func grants(scope machine.Scope) bool {
	return scope == machine.ScopeTask || scope == machine.ScopeSession || scope == machine.ScopeAlways
}

// grantable refuses, before anything is written, an approval of
// pendingID with d's scope that could not record its grant: one of a
// call the policy approves once only, no pattern covers alone, or
// d.GrantMatch does not cover (with d's edit of its arguments, if any).
// A call it cannot read is left to the decision, which reads it again.
func (s *Service) grantable(ctx context.Context, a Actor, pendingID string, d machine.Decision) error {
	if !d.Approve || !grants(d.Scope) {
		return nil
	}
	e, err := s.latest(ctx, pendingID)
	if err != nil {
		return nil
	}
	if len(d.Arguments) > 0 {
		c := *e
		c.ToolArguments = d.Arguments
		e = &c
	}
	if _, err := s.grantAs(a, e, d.Scope, d.GrantMatch); err != nil {
		return fmt.Errorf("decide %s: scope %s: %w", pendingID, d.Scope, err)
	}
	return nil
}

// grantAs is grantOf as a is shown the call: with its pattern, and a
// refusal quoting the call, derived from the arguments as a sees them (a
// secret in a command line stays masked).
func (s *Service) grantAs(a Actor, e *machine.Entry, scope machine.Scope, match string) (policy.Grant, error) {
	shown := s.shown(a, e)
	masked := !bytes.Equal(shown.ToolArguments, e.ToolArguments)
	g, err := s.grantOf(e, scope, match)
	switch {
	case err != nil && masked:
		if _, serr := s.grantOf(shown, scope, match); serr != nil {
			return g, serr
		}
		return g, fmt.Errorf("%w: toolArguments: no pattern covers this %s call alone; approve it once", machine.ErrInvalid, e.ToolName)
	case err == nil && masked && match == "":
		g.Pattern = policy.ShownGrantPattern(shown.Call())
	}
	return g, err
}

// grantOf is the grant an approval of e with scope (task, session or
// always) records, but for who grants it and until when: what it covers
// (match's pattern, or the one policy.GrantPattern derives from the call)
// and what bounds it. A call the policy approves once only (noGrants,
// noGrantsAtRisk) has none. GrantPreview shows it before anyone grants;
// recordScope records it.
func (s *Service) grantOf(e *machine.Entry, scope machine.Scope, match string) (policy.Grant, error) {
	terms := s.grantTerms(e)
	if terms.Refusal != "" {
		return policy.Grant{}, fmt.Errorf("%w: the policy has this call approved once only, by %s", machine.ErrInvalid, terms.Refusal)
	}
	g := policy.Grant{Team: e.Team, PendingID: e.PendingID}
	var err error
	if match != "" {
		g.Pattern, err = policy.NarrowGrantPattern(e.Call(), match, terms.Argument)
		g.Argument = terms.Argument
	} else {
		g.Pattern, err = policy.GrantPattern(e.Call())
	}
	if err != nil {
		return policy.Grant{}, err
	}
	switch scope {
	case machine.ScopeTask:
		g.ConversationID, g.TaskID = e.ConversationID, e.TaskID
	case machine.ScopeSession:
		g.ConversationID = e.ConversationID
	}
	return g, nil
}

// grantTerms is what the policy in force says of granting e's call:
// without a policy engine, no refusal and no argument to narrow by.
func (s *Service) grantTerms(e *machine.Entry) policy.GrantTerms {
	if s.limits == nil {
		return policy.GrantTerms{}
	}
	return s.limits.GrantTerms(e.Call(), e.Risk)
}

// GrantPreview says what an approval of a call with r.Scope would grant,
// before anyone grants it: the tool, the pattern derived from the call,
// and what bounds the grant. It changes nothing. Approvers and viewers
// see the pattern as they see the call's arguments: its secrets masked.
func (s *Service) GrantPreview(ctx context.Context, a Actor, r wire.GrantPreviewRequest) (*wire.GrantPreview, error) {
	if err := a.require("preview grants", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	switch r.Scope {
	case machine.ScopeTask, machine.ScopeSession, machine.ScopeAlways:
	case "", machine.ScopeOnce:
		return nil, fmt.Errorf("%w: scope: an approval once records no grant; preview task, session or always", machine.ErrInvalid)
	default:
		return nil, fmt.Errorf("%w: scope: must be task, session or always, got %q", machine.ErrInvalid, r.Scope)
	}
	if r.PendingID == "" {
		return nil, fmt.Errorf("%w: pendingId: required", machine.ErrInvalid)
	}
	e, _, err := s.calls.Get(ctx, r.PendingID)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", r.PendingID, err)
	}
	if r.Scope == machine.ScopeTask && e.TaskID == "" {
		return nil, fmt.Errorf("%w: scope task: the call names no task (it was submitted without a taskId)", machine.ErrInvalid)
	}
	if e.Quorum != nil {
		return nil, fmt.Errorf("%w: scope %s: a call under a quorum records no grant (later calls would skip the quorum); approve it once", machine.ErrInvalid, r.Scope)
	}
	g, err := s.grantAs(a, e, r.Scope, r.Match)
	if err != nil {
		return nil, fmt.Errorf("grant of %s: %w", r.PendingID, err)
	}
	return &wire.GrantPreview{PendingID: e.PendingID, ToolName: e.ToolName, Scope: r.Scope, Pattern: g.Pattern,
		ConversationID: g.ConversationID, TaskID: g.TaskID, Team: g.Team, Argument: policy.ArgumentName(e.ToolName, s.grantTerms(e).Argument)}, nil
}

// Grants lists the grants in force (a conversation's, when given): who
// granted each, from which call, what it covers and until when.
func (s *Service) Grants(ctx context.Context, a Actor, r wire.GrantsRequest) ([]wire.Grant, error) {
	if err := a.require("list grants", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	all, err := s.grants.All(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	grants := []wire.Grant{}
	for _, g := range all {
		if g.Live(now) && (r.ConversationID == "" || g.ConversationID == r.ConversationID) {
			w := wireGrant(g)
			if !a.system {
				// A pattern derived from a command line may quote a
				// secret in it: masked for people, as the call's
				// arguments are.
				if tool, inner, ok := strings.Cut(w.Pattern, "("); ok && strings.HasSuffix(inner, ")") {
					w.Pattern = tool + "(" + s.maskText(g.Team, g.ConversationID, strings.TrimSuffix(inner, ")")) + ")"
				}
			}
			grants = append(grants, w)
		}
	}
	slices.SortFunc(grants, func(x, y wire.Grant) int { return cmp.Or(cmp.Compare(x.At, y.At), strings.Compare(x.ID, y.ID)) })
	return grants, nil
}

// RevokeGrant ends a grant at once, on every process that matches grants.
func (s *Service) RevokeGrant(ctx context.Context, a Actor, r wire.RevokeGrantRequest) (*wire.Grant, error) {
	if err := a.require("revoke grants", wire.RoleApprover); err != nil {
		return nil, err
	}
	if r.ID == "" {
		return nil, fmt.Errorf("%w: id: required", machine.ErrInvalid)
	}
	g, err := s.grants.Revoke(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	w := wireGrant(g)
	return &w, nil
}

func wireGrant(g policy.Grant) wire.Grant {
	return wire.Grant{ID: g.ID, Pattern: g.Pattern, ConversationID: g.ConversationID, Team: g.Team, By: g.By, At: g.At,
		TaskID: g.TaskID, PendingID: g.PendingID, ExpiresAt: g.ExpiresAt, SingleUse: g.SingleUse, Argument: g.Argument}
}

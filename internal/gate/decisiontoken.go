package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// One-time decision tokens let a notification carry the decision itself:
// an ntfy action or a webhook receiver POSTs the token, and the call is
// decided without anyone signing in. A token is good for one decision
// (approve or reject) on one call, made as the approver the notification's
// channel names, once, until the call's approval deadline. Only its
// SHA-256 is stored (stores.DecisionTokenStore).

// Links are the one-time decision links: toolgate's notifier issues
// their tokens, and a token, its own credential, is viewed and redeemed
// with no actor a transport authenticated; so neither is a use case of
// the Service.
type Links struct{ s *Service }

// Links returns the decision links of the calls s serves.
func (s *Service) Links() Links { return Links{s: s} }

// DecisionTokens are the tokens issued for one call: one per decision
// offered.
type DecisionTokens struct {
	Approve, Reject string
	// ExpiresAt is when they stop being good: the call's approval deadline,
	// or bus.MaxDecisionTokenLife from now if that is sooner.
	ExpiresAt time.Time
}

// Issue issues the tokens of a pending call for approver, the identity
// the decisions are made as. Only toolgate itself (its notifier) issues
// them; a channel that names no approver gets none.
func (l Links) Issue(ctx context.Context, a Actor, pendingID, approver string) (DecisionTokens, error) {
	s := l.s
	if !a.system {
		return DecisionTokens{}, fmt.Errorf("%w: issue decision tokens: only toolgate itself issues them, for its notifications", machine.ErrForbidden)
	}
	if approver == "" {
		return DecisionTokens{}, fmt.Errorf("%w: approver: required: a decision token decides as a named approver (the channel's approver)", machine.ErrInvalid)
	}
	e, _, err := s.calls.Get(ctx, pendingID)
	if err != nil {
		return DecisionTokens{}, fmt.Errorf("issue decision tokens for %s: %w", pendingID, err)
	}
	if e.Status != machine.StatePendingApproval {
		return DecisionTokens{}, fmt.Errorf("%w: issue decision tokens for %s: it is %s, not pending approval", machine.ErrConflict, pendingID, e.Status)
	}
	now := s.now()
	expires := now.Add(bus.MaxDecisionTokenLife)
	if d := time.UnixMilli(e.ApprovalTimeoutAt); e.ApprovalTimeoutAt > 0 && d.Before(expires) {
		expires = d
	}
	if !expires.After(now) {
		return DecisionTokens{}, fmt.Errorf("issue decision tokens for %s: %w", pendingID, machine.ErrExpired)
	}
	t := stores.DecisionToken{PendingID: pendingID, Approver: approver, IssuedAt: now.UnixMilli(), ExpiresAt: expires.UnixMilli()}
	out := DecisionTokens{ExpiresAt: expires}
	t.Approve = true
	if out.Approve, err = s.tokens.Issue(ctx, t); err != nil {
		return DecisionTokens{}, err
	}
	t.Approve = false
	if out.Reject, err = s.tokens.Issue(ctx, t); err != nil {
		return DecisionTokens{}, err
	}
	return out, nil
}

// DecisionTokenView is what a token would do, for the page a browser
// shows before redeeming it.
type DecisionTokenView struct {
	Approve   bool
	Approver  string
	ExpiresAt time.Time
	Used      bool
	Expired   bool
	// Entry is the call as its approver sees it (secrets masked).
	Entry *machine.Entry
}

// View says what token would do, deciding nothing. The token is the
// credential: one never issued is not found.
func (l Links) View(ctx context.Context, token string) (DecisionTokenView, error) {
	s := l.s
	t, _, err := s.tokens.Get(ctx, token)
	if err != nil {
		return DecisionTokenView{}, fmt.Errorf("decision token: %w", err)
	}
	e, _, err := s.calls.Get(ctx, t.PendingID)
	if err != nil {
		return DecisionTokenView{}, fmt.Errorf("decision token: call %s: %w", t.PendingID, err)
	}
	return DecisionTokenView{
		Approve: t.Approve, Approver: t.Approver, ExpiresAt: time.UnixMilli(t.ExpiresAt), Used: t.UsedAt != 0,
		Expired: s.now().UnixMilli() > t.ExpiresAt, Entry: s.shown(tokenActor(t), e),
	}, nil
}

// Redeem makes the decision token stands for, once: the token is marked
// used by compare-and-set before the decision, so of two redemptions
// racing exactly one decides, and a token used before, past its deadline
// or never issued decides nothing. The decision is the token's
// approver's, checked as any of theirs is (the policy's approvers, never
// their own call).
func (l Links) Redeem(ctx context.Context, token string) (*machine.Entry, error) {
	s := l.s
	t, rev, err := s.tokens.Get(ctx, token)
	if err != nil {
		return nil, fmt.Errorf("decision token: %w", err)
	}
	if t.UsedAt != 0 {
		return nil, fmt.Errorf("%w: used at %s", stores.ErrTokenUsed, time.UnixMilli(t.UsedAt).UTC().Format(time.RFC3339))
	}
	now := s.now()
	if now.UnixMilli() > t.ExpiresAt {
		return nil, fmt.Errorf("decision token for %s: good until %s: %w", t.PendingID, time.UnixMilli(t.ExpiresAt).UTC().Format(time.RFC3339), machine.ErrExpired)
	}
	if _, err := s.tokens.Use(ctx, token, t, rev, now); err != nil {
		if errors.Is(err, stores.ErrTokenUsed) {
			return nil, fmt.Errorf("%w: by another request a moment ago", err)
		}
		return nil, err
	}
	reason := "rejected with a one-time link"
	if t.Approve {
		reason = "approved with a one-time link"
	}
	return s.decide(ctx, tokenActor(t), t.PendingID, machine.Decision{Approve: t.Approve, Scope: t.Scope, Reason: reason})
}

// tokenActor is the approver a token decides as.
func tokenActor(t stores.DecisionToken) Actor {
	return Actor{Name: t.Approver, Roles: []wire.Role{wire.RoleApprover}}
}

package machine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Quorum is how many distinct approvers a call needs before it is
// approved, and who counts. Each approval short of Required is recorded
// (a vote event, PENDING_APPROVAL to itself); the one that reaches it
// approves the call. A rejection ends the call at once, or with
// RejectMajority once most of those who may decide said no.
type Quorum struct {
	Required int `json:"required"`
	// Of are the users (and groups, GroupPrefix) whose approvals count
	// (and who may decide the call); empty: the call's approvers, or
	// anyone who may approve. Each person counts once, whatever groups
	// they are in.
	Of []string `json:"of,omitempty"`
	// RejectWhen is RejectAny (default) or RejectMajority.
	RejectWhen RejectWhen `json:"rejectWhen,omitempty"`
}

// RejectWhen says when rejections end a call under a quorum.
type RejectWhen string

// When rejections end a call under a quorum.
const (
	// RejectAny: the first rejection rejects the call.
	RejectAny RejectWhen = "any"
	// RejectMajority: the call is rejected once more than half of those
	// who may decide it said no (of the users named: a group's members
	// cannot be counted).
	RejectMajority RejectWhen = "majority"
)

// Valid reports whether w is "" (RejectAny), RejectAny or RejectMajority.
func (w RejectWhen) Valid() bool { return w == "" || w == RejectAny || w == RejectMajority }

// Vote is one approver's say on a call under a quorum.
type Vote struct {
	By      string `json:"by"`
	Approve bool   `json:"approve"`
	At      int64  `json:"at"`
	Reason  string `json:"reason,omitempty"`
	// ViaGroup is the group that let By vote, when the deciders name
	// By only through it (Transition.ViaGroup).
	ViaGroup string `json:"viaGroup,omitempty"`
}

// Escalation is one tier of a call's escalation: at At (epoch ms), if
// nobody has decided the call, To join those who may decide it and the
// approvers are notified again.
type Escalation struct {
	At int64    `json:"at"`
	To []string `json:"to"`
}

// EscalationTier is an escalation as the policy states it: After the
// call was asked.
type EscalationTier struct {
	After time.Duration
	To    []string
}

// Deciders are who may decide e now: the quorum's members, else its
// approvers (or its one named approver), widened by every escalation
// tier reached; users and groups (GroupPrefix). nil means anyone who may
// approve calls.
func (e *Entry) Deciders() []string {
	var base []string
	switch {
	case e.Quorum != nil && len(e.Quorum.Of) > 0:
		base = e.Quorum.Of
	case e.UserIDToApprove != "":
		base = []string{e.UserIDToApprove}
	case len(e.Approvers) > 0:
		base = e.Approvers
	default:
		return nil // anyone: an escalation only tells more people
	}
	out := slices.Clone(base)
	for _, t := range e.Escalations[:min(max(e.Escalated, 0), len(e.Escalations))] {
		for _, u := range t.To {
			if !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	return out
}

// Approvals counts the distinct approvals e has.
func (e *Entry) Approvals() int { return e.votes(true) }

func (e *Entry) votes(approve bool) int {
	n := 0
	for _, v := range e.Votes {
		if v.Approve == approve {
			n++
		}
	}
	return n
}

// vote returns by's vote on e, if any.
func (e *Entry) vote(by string) (Vote, bool) {
	for _, v := range e.Votes {
		if v.By == by {
			return v, true
		}
	}
	return Vote{}, false
}

// Needed says what a call under a quorum still needs, for people: "1 of 2
// approvals; still needed: one of bob, carol". "" when e has no quorum.
func (e *Entry) Needed() string {
	if e.Quorum == nil {
		return ""
	}
	s := fmt.Sprintf("%d of %d approvals", e.Approvals(), e.Quorum.Required)
	if e.Status != StatePendingApproval {
		return s
	}
	var waiting []string
	for _, u := range e.Deciders() {
		if _, voted := e.vote(u); !voted && u != e.CallerBotID {
			waiting = append(waiting, u)
		}
	}
	if waiting != nil {
		s += "; still needed: " + countWord(e.Quorum.Required-e.Approvals()) + " of " + strings.Join(waiting, ", ")
	}
	return s
}

func countWord(n int) string {
	if n == 1 {
		return "one"
	}
	return fmt.Sprint(n)
}

// Settles reports whether one more decider's approval (or rejection)
// decides e: always without a quorum; under one, when it makes the
// approvals required (or ends the call, see rejectsNow). Otherwise it is
// a vote, and e waits for more.
func (e *Entry) Settles(approve bool) bool {
	if approve {
		return e.Quorum == nil || e.Approvals()+1 >= e.Quorum.Required
	}
	return e.rejectsNow()
}

// rejectsNow reports whether a rejection by by, on top of e's votes, ends
// the call: always with RejectAny, with RejectMajority once more than
// half of the users who may decide said no (or at once when no user is
// named). The policy lets no group into a majority's count (how many
// are in it is the provider's to know), but an escalation tier may add
// one, whose members then decide without changing the count.
func (e *Entry) rejectsNow() bool {
	if e.Quorum == nil || e.Quorum.RejectWhen != RejectMajority {
		return true
	}
	n := people(e.Deciders())
	if n == 0 {
		return true
	}
	return 2*(e.votes(false)+1) > n
}

// mayDecide checks that by, in groups, may decide e as it is now: a
// decider of it (named, or in a group named), and not the agent that
// asked. via is the group that admits by, when no name does.
func (e *Entry) mayDecide(by string, groups []string) (via string, err error) {
	if by == e.CallerBotID {
		return "", fmt.Errorf("%w: %s asked for this call and may not decide it", ErrForbidden, by)
	}
	who := e.Deciders()
	if who == nil {
		return "", nil
	}
	if len(who) == 1 && who[0] == e.UserIDToApprove && by != who[0] {
		return "", fmt.Errorf("%w: only %s may decide this call, not %s", ErrForbidden, who[0], by)
	}
	via, ok := admits(who, by, groups)
	if !ok {
		if people(who) < len(who) {
			return "", fmt.Errorf("%w: %s is not among this call's approvers %v, nor in a group they name", ErrForbidden, by, who)
		}
		return "", fmt.Errorf("%w: %s is not among this call's approvers %v", ErrForbidden, by, who)
	}
	return via, nil
}

// castVote records d on e, a call under a quorum, and says so in the
// transition's reason when it is a vote. It refuses a second say from
// the same approver (but for a rejection under RejectAny, which ends the
// call), and what a call under a quorum cannot have: a grant, which
// would let later calls skip the quorum, or an edit, which would have
// its approvers approve different arguments.
func (e *Entry) castVote(d Decision, now time.Time) error {
	if d.Approve && d.Scope != "" && d.Scope != ScopeOnce {
		return invalidf("scope %s: a call under a quorum is approved once, by each of its approvers (a grant would let later calls skip the quorum)", d.Scope)
	}
	if len(d.Arguments) > 0 {
		return fmt.Errorf("%w: a call under a quorum runs as submitted, so that its approvers approve the same arguments", ErrEditDenied)
	}
	if prior, ok := e.vote(d.By); ok && (d.Approve || e.Quorum.RejectWhen == RejectMajority) {
		said := "rejected"
		if prior.Approve {
			said = "approved"
		}
		return fmt.Errorf("%w: %s %s this call already, and an approver counts once (%s)", ErrConflict, d.By, said, e.Needed())
	}
	e.Votes = append(slices.Clone(e.Votes), Vote{By: d.By, Approve: d.Approve, At: now.UnixMilli(), Reason: d.Reason, ViaGroup: e.LastTransition.ViaGroup})
	if t := e.LastTransition; t.Event == EventVote {
		said := "rejected"
		if d.Approve {
			said = "approved"
		}
		t.Reason = fmt.Sprintf("%s by %s: %s", said, d.By, e.Needed())
		if t.ViaGroup != "" {
			t.Reason = fmt.Sprintf("%s by %s (%s%s): %s", said, d.By, GroupPrefix, t.ViaGroup, e.Needed())
		}
		if n := e.votes(false); n > 0 {
			t.Reason += fmt.Sprintf("; %d rejected", n)
		}
		if d.Reason != "" {
			t.Reason += " (" + d.Reason + ")"
		}
	}
	return nil
}

// Escalate moves a call nobody has decided to its next escalation tier,
// at that tier's time: its people may decide it from now on, and the
// event tells them. A call decided, or not due, is left alone.
func (m *Machine) Escalate(ctx context.Context, pendingID string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventEscalate, "timer", "", func(e *Entry, now time.Time) error {
		if e.Escalated >= len(e.Escalations) || now.UnixMilli() < e.Escalations[e.Escalated].At {
			return &TransitionError{Event: EventEscalate, Entry: e}
		}
		tier := e.Escalations[e.Escalated]
		e.Escalated++
		e.LastTransition.Reason = fmt.Sprintf("nobody decided in time: escalated (tier %d of %d) to %s", e.Escalated, len(e.Escalations), strings.Join(tier.To, ", "))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("escalate %s: %w", pendingID, err)
	}
	return e, nil
}

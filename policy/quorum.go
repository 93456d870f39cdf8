package policy

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// A scope's quorum map asks, of the calls a pattern matches, for that
// many distinct approvals before they run ("transfer_funds": {required:
// 2, of: [alice, bob, carol]}). Its keys are patterns in rule syntax, as
// risk's are, and it merges per key across scopes; a call several
// patterns match needs the largest quorum among them. A quorum changes
// nothing of whether a call is asked (rules and the other fields say
// that); it says what an asked call needs. A grant never covers a call
// under a quorum: each such call is asked.
//
// A scope's escalate list widens who may decide a call nobody has
// decided, tier by tier: afterMs after the call was asked, the tier's
// users may decide it too, and its approvers are told again. Like
// notify, the narrowest scope that sets it wins ("escalate: []" turns
// it off).

// QuorumRule is one entry of a scope's quorum map.
type QuorumRule struct {
	// Required is how many distinct approvers must approve (2 to 16).
	Required int `yaml:"required" json:"required"`
	// Of are the users whose approvals count, and who alone may decide
	// the calls; empty: the scope's approvers (or any approver).
	Of Names `yaml:"of,omitempty" json:"of,omitzero"`
	// RejectWhen is "any" (default: one rejection rejects the call) or
	// "majority" (once more than half of those who may decide said no;
	// needs of, or approvers, to count a majority of).
	RejectWhen machine.RejectWhen `yaml:"rejectWhen,omitempty" json:"rejectWhen,omitempty"`
}

// Tier is one step of a scope's escalate list.
type Tier struct {
	// AfterMs is how long after the call was asked the tier is reached.
	AfterMs int64 `yaml:"afterMs" json:"afterMs"`
	// To are the users who may decide the call from then on.
	To Names `yaml:"to" json:"to"`
}

// Tiers is a scope's escalate list. Like Names, it is its own type so
// that an explicit empty list survives Marshal.
type Tiers []Tier

// IsZero reports whether the list is unset, for yaml's omitempty and json's omitzero.
func (t Tiers) IsZero() bool { return t == nil }

// maxQuorum bounds required: a quorum is a few people, not a vote.
const maxQuorum = 16

// compiledQuorum is a quorum map's entry, compiled.
type compiledQuorum struct {
	Pattern Pattern
	Rule    QuorumRule
	Scope   string
}

// compileQuorum checks a scope's quorum map against its approvers (those
// the scope names, if it names any) and compiles its patterns.
func compileQuorum(errs *errorList, scope string, p *Policy) map[string]compiledQuorum {
	path := scope + ".quorum"
	out := map[string]compiledQuorum{}
	for _, key := range slices.Sorted(maps.Keys(p.Quorum)) {
		f := index(path, key)
		pat, err := parsePattern(key)
		if err != nil {
			errs.add(f, "%q: %v", key, err)
			continue
		}
		q := p.Quorum[key]
		ok := true
		switch {
		case q.Required < 2 || q.Required > maxQuorum:
			errs.add(f+".required", "must be 2 to %d (one approval is no quorum), got %d", maxQuorum, q.Required)
			ok = false
		// A group holds as many people as its provider says: only a
		// list of users alone can be counted here.
		case len(q.Of) > 0 && !hasGroup(q.Of) && len(q.Of) < q.Required:
			errs.add(f+".of", "lists %d users, fewer than the %d approvals required", len(q.Of), q.Required)
			ok = false
		case len(q.Of) == 0 && p.UserIDToApprove != nil:
			errs.add(f+".of", "required: the scope's userIdToApprove is one approver, and %d must approve", q.Required)
			ok = false
		case len(q.Of) == 0 && len(p.Approvers) > 0 && !hasGroup(p.Approvers) && len(p.Approvers) < q.Required:
			errs.add(f+".required", "%d approvals, but the scope has only %d approvers", q.Required, len(p.Approvers))
			ok = false
		}
		members, from := q.Of, "of names"
		if len(members) == 0 {
			members, from = p.Approvers, "the scope's approvers name"
		}
		switch {
		case !q.RejectWhen.Valid():
			errs.add(f+".rejectWhen", "must be any or majority, got %q", string(q.RejectWhen))
			ok = false
		case q.RejectWhen == machine.RejectMajority && len(members) == 0:
			errs.add(f+".rejectWhen", "majority of whom: give of, or the scope's approvers")
			ok = false
		case q.RejectWhen == machine.RejectMajority && hasGroup(members):
			errs.add(f+".rejectWhen", "majority: %s a group, whose members toolgate cannot count: name the people, or reject at the first no (any)", from)
			ok = false
		}
		if !checkPeople(errs, f+".of", q.Of) {
			ok = false
		}
		if ok {
			out[key] = compiledQuorum{Pattern: pat, Rule: q, Scope: scope}
		}
	}
	return out
}

// hasGroup reports whether a list of people names a group.
func hasGroup(people []string) bool {
	return slices.ContainsFunc(people, func(u string) bool {
		_, isGroup := machine.GroupOf(u)
		return isGroup
	})
}

// checkTiers checks a scope's escalate list: each tier later than the
// one before, and naming somebody.
func checkTiers(errs *errorList, path string, tiers Tiers) {
	if len(tiers) > 8 {
		errs.add(path, "at most 8 tiers, got %d", len(tiers))
	}
	var last int64
	for i, t := range tiers {
		at := fmt.Sprintf("%s[%d]", path, i)
		checkMs(errs, at+".afterMs", &t.AfterMs, 1)
		if i > 0 && t.AfterMs <= last {
			errs.add(at+".afterMs", "must be later than the tier before (%d), got %d", last, t.AfterMs)
		}
		last = t.AfterMs
		if len(t.To) == 0 {
			errs.add(at+".to", "required: the users or groups who may decide the call from then on")
		}
		for j, u := range t.To {
			if msg := personProblem(u); msg != "" {
				errs.add(fmt.Sprintf("%s.to[%d]", at, j), "%s", msg)
			}
		}
	}
}

// quorum is the quorum the policy asks of a call (as cs holds it): the
// largest of the patterns that match it, nil when none does. Without a
// list of its own, its members are the call's approvers.
func (r *Resolved) quorum(cs callSubject) *machine.Quorum {
	var best *compiledQuorum
	for _, key := range slices.Sorted(maps.Keys(r.Quorums)) {
		q := r.Quorums[key]
		if (best == nil || q.Rule.Required > best.Rule.Required) && q.Pattern.matchCall(cs, false) {
			best = &q
		}
	}
	if best == nil {
		return nil
	}
	return &machine.Quorum{Required: best.Rule.Required, Of: slices.Clone([]string(best.Rule.Of)), RejectWhen: best.Rule.RejectWhen}
}

// tiers is the escalation of the calls r asks about.
func (r *Resolved) tiers() []machine.EscalationTier {
	var out []machine.EscalationTier
	for _, t := range r.Escalate {
		out = append(out, machine.EscalationTier{After: time.Duration(t.AfterMs) * time.Millisecond, To: slices.Clone([]string(t.To))})
	}
	return out
}

package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/toolgate/toolgate/machine"
)

// A scope's onTimeout map says what the timer does with the asked calls
// a pattern matches when nobody decided by the deadline: reject
// (REJECTED_BY_TIMEOUT, as autoRejectOnTimeout does), cancel
// (CANCELLED_BY_SYSTEM) or approve (APPROVED_READY_FOR_EXECUTION). Like
// risk, it merges per key across scopes, and a call several patterns
// match gets the safest of their outcomes. An approval is never what a
// timeout gives a call a deny rule, a quorum or a high risk covers: the
// document is refused where that shows in the patterns themselves
// (checkTimeoutApprovals), and the timer checks the call itself at the
// deadline (machine's timeoutApproval), rejecting it, saying why, when
// the policy then would not approve it so.
//
// A scope's respondable list names the patterns whose asked calls an
// approver may answer with the tool's result instead of running them
// (machine.Decision.Result). Like the other lists, the narrowest scope
// that sets it replaces the wider ones'.

// TimeoutRule is one entry of a scope's onTimeout map, compiled.
type TimeoutRule struct {
	Pattern Pattern
	Outcome machine.TimeoutOutcome
	Scope   string
}

// safety orders timeout outcomes, safest highest: where several patterns
// match a call, the safest wins.
func safety(o machine.TimeoutOutcome) int {
	switch o {
	case machine.TimeoutReject:
		return 3
	case machine.TimeoutCancel:
		return 2
	case machine.TimeoutApprove:
		return 1
	}
	return 0
}

// compileDecisions checks a scope's onTimeout map and respondable list
// and compiles their patterns.
func compileDecisions(errs *errorList, scope string, p *Policy) (map[string]TimeoutRule, []Pattern) {
	timeouts := map[string]TimeoutRule{}
	for _, key := range slices.Sorted(maps.Keys(p.OnTimeout)) {
		f := index(scope+".onTimeout", key)
		pat, err := parsePattern(key)
		if err != nil {
			errs.add(f, "%q: %v", key, err)
			continue
		}
		o := p.OnTimeout[key]
		if !o.Valid() {
			errs.add(f, "must be reject, cancel or approve, got %q", string(o))
			continue
		}
		timeouts[key] = TimeoutRule{Pattern: pat, Outcome: o, Scope: scope}
	}
	return timeouts, compilePatterns(errs, scope, "respondable", p.Respondable)
}

// checkTimeoutApprovals refuses an onTimeout approve, in any scope, for
// calls that a deny rule, a quorum or a high risk of any scope covers as
// far as the patterns show: the same tool, and the same pattern or one
// with no specifier (every call of the tool). Patterns that differ only
// in their specifiers may still both match a call; the timer checks
// that call at its deadline.
func checkTimeoutApprovals(errs *errorList, c *compiled) {
	all := append([]*layer{c.def}, slices.Collect(maps.Values(c.teams))...)
	all = append(all, slices.Collect(maps.Values(c.convs))...)
	type reserved struct {
		pat  Pattern
		what string
	}
	var held []reserved
	for _, l := range all {
		for _, r := range l.rules.Deny {
			held = append(held, reserved{r.Pattern, fmt.Sprintf("rules.deny %q (%s)", r.Pattern.String(), l.scope)})
		}
		for key, q := range l.quorums {
			held = append(held, reserved{q.Pattern, fmt.Sprintf("%s (%s)", index("quorum", key), l.scope)})
		}
		for key, rr := range l.risks {
			if rr.Risk == machine.RiskHigh {
				held = append(held, reserved{rr.Pattern, fmt.Sprintf("%s high (%s)", index("risk", key), l.scope)})
			}
		}
	}
	for _, l := range all {
		for _, key := range slices.Sorted(maps.Keys(l.timeouts)) {
			tr := l.timeouts[key]
			if tr.Outcome != machine.TimeoutApprove {
				continue
			}
			for _, h := range held {
				if overlaps(tr.Pattern, h.pat) {
					errs.add(index(l.scope+".onTimeout", key), "approve: %s covers these calls; a timeout approves no call a deny rule, a quorum or a high risk holds for humans: say reject or cancel, or narrow the pattern", h.what)
					break
				}
			}
		}
	}
}

// overlaps reports whether two patterns plainly match some call alike:
// one's tool is the other's (or in its MCP server), and one has no
// specifier or both the same.
func overlaps(a, b Pattern) bool {
	if !a.matchesTool(b.tool) && !b.matchesTool(a.tool) {
		return false
	}
	return a.re == nil || b.re == nil || a.raw == b.raw
}

// onTimeout is what the timer does at the deadline with a call (as cs
// holds it) the policy asks about: the safest outcome of the onTimeout
// patterns that match it; "" when none does (autoRejectOnTimeout says).
// An approve pattern matches as an allow rule would (every command of a
// Bash line, never one it cannot read), the others as a deny rule.
func (r *Resolved) onTimeout(cs callSubject) machine.TimeoutOutcome {
	var best machine.TimeoutOutcome
	for _, key := range slices.Sorted(maps.Keys(r.OnTimeout)) {
		tr := r.OnTimeout[key]
		if safety(tr.Outcome) > safety(best) && tr.Pattern.matchCall(cs, tr.Outcome == machine.TimeoutApprove) {
			best = tr.Outcome
		}
	}
	return best
}

// respondable reports whether an approver may answer a call (as cs
// holds it) with its result: a respondable pattern matches it, as an
// allow rule would.
func (r *Resolved) respondable(cs callSubject) bool {
	for _, p := range r.Respondable {
		if p.matchCall(cs, true) {
			return true
		}
	}
	return false
}

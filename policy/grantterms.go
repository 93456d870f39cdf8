package policy

import (
	"fmt"

	"github.com/toolgate/toolgate/machine"
)

// GrantTerms are what the policy in force says of granting a call: the
// argument a grant narrowed by a specifier reads, and whether it may be
// granted at all.
type GrantTerms struct {
	// Argument is the argument of the call's tool that a narrowed grant's
	// specifier reads: matchArgument's for a tool that is not built in, ""
	// for a built-in tool (which reads its own) or when none is named.
	Argument string
	// Refusal, when set, says why the policy lets no grant cover the call
	// (noGrants, noGrantsAtRisk): it is approved once only.
	Refusal string
}

// GrantTerms says what the policy in force for c's team and conversation
// says of granting c, whose risk is risk.
func (e *Engine) GrantTerms(c machine.Call, risk machine.Risk) GrantTerms {
	r := e.snap.Load().c.resolve(c.Team, c.ConversationID)
	var t GrantTerms
	if _, builtin := builtinArgs[c.ToolName]; !builtin {
		t.Argument = r.ArgumentOf(c.ToolName)
	}
	args, err := callArguments(c)
	if err != nil {
		args = nil
	}
	cs := newCallSubject(c.ToolName, args, t.Argument)
	for _, p := range r.NoGrants {
		if p.matchCall(cs, false) {
			t.Refusal = fmt.Sprintf("noGrants %q (%s)", p.String(), r.Sources["noGrants"])
			return t
		}
	}
	if r.NoGrantsAtRisk != "" && risk.Rank() >= r.NoGrantsAtRisk.Rank() {
		t.Refusal = fmt.Sprintf("noGrantsAtRisk %s (%s): the call's risk is %s", r.NoGrantsAtRisk, r.Sources["noGrantsAtRisk"], risk)
	}
	return t
}

// compileNoGrants checks a scope's noGrants patterns and noGrantsAtRisk.
func compileNoGrants(errs *errorList, scope string, p *Policy) []Pattern {
	pats := compilePatterns(errs, scope, "noGrants", p.NoGrants)
	if r := p.NoGrantsAtRisk; r != nil && *r != "none" && !machine.Risk(*r).Valid() {
		errs.add(scope+".noGrantsAtRisk", "must be high, medium, low or none, got %q", *r)
	}
	return pats
}

// noGrantsRisk is noGrantsAtRisk as Resolved holds it: "" for none.
func noGrantsRisk(s string) machine.Risk {
	if s == "none" {
		return ""
	}
	return machine.Risk(s)
}

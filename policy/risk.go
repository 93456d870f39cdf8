package policy

import (
	"maps"
	"slices"

	"github.com/toolgate/toolgate/machine"
)

// A scope's risk map attaches a risk to the calls a pattern matches, for
// approvers to see first: "transfer_funds: high" for every call of a
// tool, `"Bash(git push *)": medium` for those a rule would match. The
// keys are patterns in rule syntax, so a risk can sit beside the ask,
// deny or allow rule it qualifies, written the same way. Like editable,
// it merges per key across scopes (a team's "Bash(git push *)" replaces
// the default's); a call several patterns match carries the highest
// risk among them.

// RiskRule is one entry of a scope's risk map, compiled.
type RiskRule struct {
	Pattern Pattern
	Risk    machine.Risk
	Scope   string
}

// compileRisk checks a scope's risk map and compiles its patterns.
func compileRisk(errs *errorList, scope string, risks map[string]machine.Risk) map[string]RiskRule {
	path := scope + ".risk"
	out := map[string]RiskRule{}
	for _, key := range slices.Sorted(maps.Keys(risks)) {
		f := index(path, key)
		pat, err := parsePattern(key)
		if err != nil {
			errs.add(f, "%q: %v", key, err)
			continue
		}
		r := risks[key]
		if !r.Valid() {
			errs.add(f, "must be high, medium or low, got %q", string(r))
			continue
		}
		out[key] = RiskRule{Pattern: pat, Risk: r, Scope: scope}
	}
	return out
}

// risk is the risk the policy attaches to a call (its tool and
// arguments, as cs holds them): the highest of the patterns that match
// it, as a deny or ask rule would match (any command of a Bash line). ""
// when none does.
func (r *Resolved) risk(cs callSubject) machine.Risk {
	var best RiskRule
	for _, key := range slices.Sorted(maps.Keys(r.Risks)) {
		rr := r.Risks[key]
		if rr.Risk.Rank() > best.Risk.Rank() && rr.Pattern.matchCall(cs, false) {
			best = rr
		}
	}
	return best.Risk
}

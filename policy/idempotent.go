package policy

import "fmt"

// A scope's idempotent list names the patterns (rule syntax) whose calls
// may run twice without harm. Only such a call is taken over by another
// executor when the one running it is lost before it reports; any other
// call that may have started ends with its outcome unknown, and runs
// again only when a person asks (machine.Entry.Reclaimable). Like the
// other lists, the narrowest scope that sets it replaces the wider
// ones'.

// compilePatterns compiles a scope's list of patterns in rule syntax,
// field naming it in errors (scope.field[i]).
func compilePatterns(errs *errorList, scope, field string, list Names) []Pattern {
	var pats []Pattern
	for i, s := range list {
		pat, err := parsePattern(s)
		if err != nil {
			errs.add(fmt.Sprintf("%s.%s[%d]", scope, field, i), "%q: %v", s, err)
			continue
		}
		pats = append(pats, pat)
	}
	return pats
}

// idempotent reports whether a call (as cs holds it) may run twice: an
// idempotent pattern matches it as an allow rule would, every command of
// a shell line included.
func (r *Resolved) idempotent(cs callSubject) bool {
	for _, p := range r.Idempotent {
		if p.matchCall(cs, true) {
			return true
		}
	}
	return false
}

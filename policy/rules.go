package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"

	"github.com/toolgate/toolgate/machine"
)

// callSubject is what rules match a call against, worked out once per call.
type callSubject struct {
	tool  string
	arg   string // the argument's name
	value string // the argument a specifier is matched against
	ok    bool   // the call has that argument, as a string
	why   string // when not ok: why the argument cannot be read
	shell bool   // value is a Bash command line
	shellLine
}

func newCallSubject(tool string, args map[string]any, matchArg string) callSubject {
	a := argument(tool, args, matchArg)
	cs := callSubject{tool: tool, arg: a.name, value: a.value, ok: a.why == "", why: a.why}
	cs.shell = cs.ok && tool == "Bash"
	if cs.shell {
		cs.shellLine = parseShell(cs.value)
	}
	return cs
}

// matchCall matches p as a rule. A deny or ask rule matches a command line
// if it matches the whole line or any command in it; an allow rule only if
// it matches every command in it, and never a line it cannot see through.
//
// A specifier that cannot read its argument (the call lacks it, it is not
// a string, or nothing names it: see argument) fails closed: a deny or ask
// rule, and a risk, quorum or rate rule, matches; an allow rule does not.
func (p Pattern) matchCall(cs callSubject, allow bool) bool {
	switch {
	case !p.matchesTool(cs.tool):
		return false
	case p.re == nil:
		return true
	case !cs.ok:
		return !allow
	case !cs.shell || len(cs.parts) == 0 && !cs.opaque:
		return p.matchValue(cs.value)
	case allow:
		if cs.opaque || len(cs.parts) == 0 {
			return false
		}
		for _, part := range cs.parts {
			if !p.matchValue(part) {
				return false
			}
		}
		return true
	}
	if p.matchValue(cs.value) {
		return true
	}
	return slices.ContainsFunc(cs.parts, p.matchValue)
}

// unread reports whether p matched cs only because it could not read
// cs's argument.
func (p Pattern) unread(cs callSubject) bool { return p.re != nil && !cs.ok }

func firstMatch(rules []Rule, cs callSubject, allow bool) (Rule, bool) {
	for _, r := range rules {
		if r.Pattern.matchCall(cs, allow) {
			return r, true
		}
	}
	return Rule{}, false
}

// ruleReason names the rule that decided a call, for the verdict's reason,
// and, when it decided because it could not read the call's argument,
// which argument and why.
func ruleReason(r Rule, cs callSubject) string {
	if !r.Pattern.unread(cs) {
		return r.String()
	}
	return r.String() + ": the rule could not read the call's argument (" + cs.why + "), so it applies"
}

// callArguments decodes a call's arguments, keeping numbers as written
// (json.Number), so that a describe template shows 1000000, not 1e+06.
func callArguments(c machine.Call) (map[string]any, error) {
	if len(bytes.TrimSpace(c.Arguments)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(c.Arguments))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil || args == nil {
		return nil, fieldErrorf("toolArguments", "must be a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fieldErrorf("toolArguments", "must be one JSON object")
	}
	return args, nil
}

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
	value string // the argument the specifier is matched against
	ok    bool   // the call has that argument
	shell bool   // value is a Bash command line
	shellLine
}

func newCallSubject(tool string, args map[string]any, matchArg string) callSubject {
	v, ok := argument(tool, args, matchArg)
	cs := callSubject{tool: tool, value: v, ok: ok, shell: ok && tool == "Bash"}
	if cs.shell {
		cs.shellLine = parseShell(v)
	}
	return cs
}

// matchCall matches p as a rule. A deny or ask rule matches a command line
// if it matches the whole line or any command in it; an allow rule only if
// it matches every command in it, and never a line it cannot see through.
func (p Pattern) matchCall(cs callSubject, allow bool) bool {
	switch {
	case !p.matchesTool(cs.tool):
		return false
	case p.re == nil:
		return true
	case !cs.ok:
		return false
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

func firstMatch(rules []Rule, cs callSubject, allow bool) (Rule, bool) {
	for _, r := range rules {
		if r.Pattern.matchCall(cs, allow) {
			return r, true
		}
	}
	return Rule{}, false
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

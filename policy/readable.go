package policy

import (
	"fmt"
	"maps"
	"slices"
)

// A specifier on a tool that is not built in reads the argument the
// policy's matchArgument names for the tool (or for its MCP server). A
// document whose specifier names no argument it could read is refused by
// Validate: its rule would mean whatever the agent's arguments made it
// mean. The Engine still takes such a document (one stored before this
// check, or built in code) and fails closed on it: see matchCall.

// ParseStored reads a document from the policies bucket: as Parse, except
// that a specifier whose argument no matchArgument names is let through,
// so that a document stored before Validate refused those still loads
// and stays in force; the Engine fails closed on its rules (see
// matchCall). Whatever else Parse refuses, it refuses.
func ParseStored(data []byte) (*Document, error) {
	doc, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if _, err := compile(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// checkReadable adds an error for every pattern with a specifier, in any
// scope, whose argument no matchArgument names in the pattern's scope or a
// scope it inherits: a team's and a conversation's inherit the default's.
func (c *compiled) checkReadable(errs *errorList) {
	all := []*layer{c.def}
	for _, name := range slices.Sorted(maps.Keys(c.teams)) {
		all = append(all, c.teams[name])
	}
	for _, id := range slices.Sorted(maps.Keys(c.convs)) {
		all = append(all, c.convs[id])
	}
	for _, l := range all {
		chain := []*layer{l}
		if l != c.def {
			chain = append(chain, c.def)
		}
		need := func(path string, p Pattern) {
			if msg := unreadable(p, chain, all); msg != "" {
				errs.add(path, "%q: %s", p.String(), msg)
			}
		}
		for _, rules := range [][]Rule{l.rules.Deny, l.rules.Ask, l.rules.Allow} {
			for _, r := range rules {
				need(fmt.Sprintf("%s.rules.%s[%d]", l.scope, r.Kind, r.Index), r.Pattern)
			}
		}
		for _, key := range slices.Sorted(maps.Keys(l.risks)) {
			need(index(l.scope+".risk", key), l.risks[key].Pattern)
		}
		for _, key := range slices.Sorted(maps.Keys(l.quorums)) {
			need(index(l.scope+".quorum", key), l.quorums[key].Pattern)
		}
		for _, rr := range l.rates {
			need(fmt.Sprintf("%s.rateLimits[%d].match", l.scope, rr.Index), rr.Pattern)
		}
		for _, f := range l.flows {
			need(fmt.Sprintf("%s.flows[%d].after", l.scope, f.Index), f.After)
			need(fmt.Sprintf("%s.flows[%d].then", l.scope, f.Index), f.Then)
			for j, u := range f.Unless {
				need(fmt.Sprintf("%s.flows[%d].unless[%d]", l.scope, f.Index, j), u)
			}
		}
	}
}

// unreadable says what is wrong with p, in the scope chain (its own
// first), when its specifier reads no argument; "" when it reads one.
// The fix it suggests names the argument when some scope of all names it
// for the same key.
func unreadable(p Pattern, chain, all []*layer) string {
	if p.re == nil || builtinArgs[p.tool] != nil {
		return ""
	}
	keys := readKeys(p)
	for _, l := range chain {
		for _, k := range keys {
			if l.p.MatchArgument[k] != "" {
				return ""
			}
		}
	}
	key, arg := keys[0], "<argument name>"
	for _, l := range all {
		if a := l.p.MatchArgument[key]; a != "" {
			arg = a
			break
		}
	}
	where := chain[0].scope
	if len(chain) > 1 {
		where += " or " + chain[len(chain)-1].scope
	}
	what := p.tool + " is not a built-in tool, so nothing says which of its arguments the specifier reads"
	if p.server {
		what = "the pattern names every tool of " + p.tool + ", so its specifier needs the argument named for the whole server"
	}
	return fmt.Sprintf("%s: add matchArgument: {%s: %s} to %s", what, key, arg, where)
}

// readKeys are the matchArgument keys that name the argument a pattern's
// specifier reads: for one tool, the tool's key or its MCP server's; for
// a whole server, only the server's.
func readKeys(p Pattern) []string {
	if p.server {
		return []string{p.tool, p.tool + "__*"}
	}
	keys := []string{p.tool}
	if srv, ok := mcpToolServer(p.tool); ok {
		keys = append(keys, srv, srv+"__*")
	}
	return keys
}

// UnreadableTools returns, of tools, those whose arguments a pattern in
// force for team and conversationID (a rule, or a risk, quorum or rate
// rule) has a specifier on while no matchArgument names the argument it
// reads (possible only in a document that was not validated): each with
// a message that names the tool and the fix and quotes no rule, for an
// agent or gateway. Such a pattern fails closed on every call of the tool.
func (e *Engine) UnreadableTools(team, conversationID string, tools []string) map[string]string {
	r := e.snap.Load().c.resolve(team, conversationID)
	var pats []Pattern
	for _, rules := range [][]Rule{r.Rules.Deny, r.Rules.Ask, r.Rules.Allow} {
		for _, rule := range rules {
			pats = append(pats, rule.Pattern)
		}
	}
	for _, rr := range r.Risks {
		pats = append(pats, rr.Pattern)
	}
	for _, q := range r.Quorums {
		pats = append(pats, q.Pattern)
	}
	for _, rl := range r.RateLimits {
		pats = append(pats, rl.Pattern)
	}
	out := map[string]string{}
	for _, tool := range tools {
		if builtinArgs[tool] != nil || r.ArgumentOf(tool) != "" {
			continue
		}
		for _, p := range pats {
			if p.re != nil && p.matchesTool(tool) {
				out[tool] = fmt.Sprintf("the policy has rules on the arguments of %s but names no argument for them to read, "+
					"so they deny or ask about its calls and allow none: the policy needs matchArgument: {%s: <argument name>}", tool, tool)
				break
			}
		}
	}
	return out
}

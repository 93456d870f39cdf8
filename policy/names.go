package policy

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// vocabulary is the tool and team names a document writes down. A call's
// tool and team are the agent's to choose, so anything that keeps state per
// name (a metric series) keys it by these instead, which only whoever sets
// the policy chooses.
type vocabulary struct {
	tools   map[string]bool // tools named one by one
	servers []string        // MCP servers named as a whole (mcp__server), longest first
	teams   map[string]bool
	// written is the tools and servers the document writes down, sorted:
	// tools less Claude Code's built-in ones it does not name.
	written []string
}

// builtinTools are Claude Code's built-in tools that the policy's own
// defaults and pattern rules know by name: a fixed list, which a policy
// names whether or not its author wrote them down.
var builtinTools = func() []string {
	t := slices.Concat(defaultReadOnlyTools, defaultEditTools, slices.Collect(maps.Keys(builtinArgs)))
	slices.Sort(t)
	return slices.Compact(t)
}()

func vocabularyOf(d *Document) *vocabulary {
	v := &vocabulary{tools: map[string]bool{}, teams: map[string]bool{}}
	servers := map[string]bool{}
	add := func(entry string) {
		if srv, ok := mcpServer(entry); ok {
			servers[srv] = true
		} else if entry != "" {
			v.tools[entry] = true
		}
	}
	scope := func(p *Policy) {
		if p == nil {
			return
		}
		if p.RequiresApprovalTools != nil {
			for _, t := range p.RequiresApprovalTools.Tools {
				add(t)
			}
		}
		for _, list := range [][]string{p.ReadOnlyTools, p.EditTools} {
			for _, t := range list {
				add(t)
			}
		}
		for _, m := range []map[string]string{p.Describe, p.MatchArgument} {
			for t := range m {
				add(t)
			}
		}
		for t := range p.ToolSpecificDelays {
			add(t)
		}
		for t := range p.Editable {
			add(t)
		}
		for _, rule := range slices.Concat(p.Rules.Deny, p.Rules.Ask, p.Rules.Allow, slices.Sorted(maps.Keys(p.Risk)), slices.Sorted(maps.Keys(p.Quorum)),
			rateMatches(p.RateLimits), flowPatterns(p.Flows), slices.Sorted(maps.Keys(p.OnTimeout)), p.Respondable, p.Idempotent) {
			pat, err := parsePattern(rule)
			switch {
			case err != nil:
			case pat.server:
				servers[pat.tool] = true
			default:
				v.tools[pat.tool] = true
			}
		}
	}
	if d == nil {
		d = &Document{}
	}
	scope(d.Default)
	for name, p := range d.Teams {
		v.teams[name] = true
		scope(p)
	}
	for _, p := range d.Conversations {
		scope(p)
	}
	v.written = slices.Sorted(maps.Keys(v.tools))
	v.written = append(v.written, slices.Collect(maps.Keys(servers))...)
	slices.Sort(v.written)
	v.written = slices.Compact(v.written)
	for _, t := range builtinTools {
		v.tools[t] = true
	}
	v.servers = slices.SortedFunc(maps.Keys(servers), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	return v
}

func (v *vocabulary) tool(tool string) (string, bool) {
	if v.tools[tool] {
		return tool, true
	}
	for _, srv := range v.servers {
		if tool == srv || strings.HasPrefix(tool, srv+"__") {
			return srv, true
		}
	}
	return "", false
}

// NamedTool returns the name the policy in force knows tool by, and whether
// it knows it at all: tool itself when a field or rule of any scope names
// it, or it is one of Claude Code's built-in tools (Bash, Read, Edit, …);
// the MCP server (mcp__server) when the policy names the server and not
// the tool; else "" and false. The names are the policy author's, so a
// caller that keeps something per name (a metric series) keeps no more of
// them than the policy has, whatever tool names agents send.
func (e *Engine) NamedTool(tool string) (string, bool) { return e.snap.Load().names.tool(tool) }

// NamedTeam reports whether the policy in force has a scope for team.
func (e *Engine) NamedTeam(team string) bool { return e.snap.Load().names.teams[team] }

// Names lists, sorted, the tool names the policy in force writes down
// (tools, and MCP servers named as a whole) and its teams: names NamedTool
// and NamedTeam know, less Claude Code's built-in tools the document does
// not name. A metric starts a series at 0 for each.
func (e *Engine) Names() (tools, teams []string) {
	v := e.snap.Load().names
	return slices.Clone(v.written), slices.Sorted(maps.Keys(v.teams))
}

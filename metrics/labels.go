package metrics

import "sync/atomic"

// OtherLabel is the tool or team label of a call whose tool or team the
// policy in force does not name.
const OtherLabel = "other"

// Vocabulary says which tool and team names the policy in force names.
// *policy.Engine is one, and follows the policy as it changes.
type Vocabulary interface {
	// NamedTool returns the name the policy knows tool by (the tool, or
	// the MCP server it names as a whole), or false.
	NamedTool(tool string) (string, bool)
	// NamedTeam reports whether the policy has a scope for team.
	NamedTeam(team string) bool
}

// NameLister is a Vocabulary that can also list the names it knows
// (*policy.Engine is one): BoundLabels starts each one's series at 0.
type NameLister interface {
	// Names lists the tool and team names the policy writes down.
	Names() (tools, teams []string)
}

// labels turns a call's tool and team into label values. An agent chooses
// its call's tool and team, and every distinct label value is a series
// Prometheus keeps for good: left as they come, an agent sending random
// tool names would grow the process's memory and the TSDB's without bound.
// So a value is kept only if the policy names it, which only whoever sets
// the policy decides, and anything else counts as OtherLabel. Without a
// vocabulary, every tool and team is OtherLabel: a process that forgot to
// bind one loses detail, not memory.
type labels struct {
	v atomic.Pointer[vocabularyRef]
}

// vocabularyRef boxes the interface for atomic.Pointer.
type vocabularyRef struct{ Vocabulary }

func (l *labels) tool(tool string) string {
	if r := l.v.Load(); r != nil {
		if name, ok := r.NamedTool(tool); ok {
			return name
		}
	}
	return OtherLabel
}

// team keeps "", a call with no team, as it is: it is one value.
func (l *labels) team(team string) string {
	if team == "" {
		return ""
	}
	if r := l.v.Load(); r != nil && r.NamedTeam(team) {
		return team
	}
	return OtherLabel
}

// teams lists the teams the vocabulary names, if it can.
func (l *labels) teams() []string {
	if r := l.v.Load(); r != nil {
		if n, ok := r.Vocabulary.(NameLister); ok {
			_, teams := n.Names()
			return teams
		}
	}
	return nil
}

// BoundLabels makes the tool and team labels of every observation from
// now on values v names, any other counting as OtherLabel (see labels).
// Every role of a process shares one Metrics (For), so binding it once, to
// the process's policy engine, bounds them all. When v can list its names
// (NameLister), their series start at 0 now; a name the policy takes up
// later starts with its first event.
func (m *Metrics) BoundLabels(v Vocabulary) {
	if v == nil {
		m.labels.v.Store(nil)
		return
	}
	m.labels.v.Store(&vocabularyRef{v})
	if n, ok := v.(NameLister); ok {
		m.initializeNames(n.Names())
	}
}

// TeamLabel is the team label of a call of team's: team if the policy
// bound names it (BoundLabels), "" for a call with no team, OtherLabel
// otherwise. A collector of its own with a team label takes its values
// from here, as toolgate_pending_approvals does.
func (m *Metrics) TeamLabel(team string) string { return m.labels.team(team) }

// NamedTeams lists the teams the policy bound names, if its vocabulary
// can list them (NameLister): the team labels to show at 0 from the start.
func (m *Metrics) NamedTeams() []string { return m.labels.teams() }

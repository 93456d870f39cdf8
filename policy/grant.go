package policy

import (
	"fmt"

	"github.com/toolgate/toolgate/machine"
)

// Grant is a human's standing yes: "allow for this session" (ConversationID
// set) or "always allow" (it is not). A call it covers runs without asking,
// unless a deny rule, plan mode or the cost limits say otherwise.
type Grant struct {
	ID string `json:"id"`
	// Pattern says what the grant covers, in rule syntax: "Bash(npm test:*)",
	// or a tool's name for every call of it.
	Pattern string `json:"pattern"`
	// ConversationID limits the grant to one conversation: a session grant.
	ConversationID string `json:"conversationId,omitempty"`
	// Team limits the grant to one team's calls.
	Team string `json:"team,omitempty"`
	By   string `json:"by"`           // who granted it
	At   int64  `json:"at,omitempty"` // when, epoch milliseconds
}

// Validate checks that the grant says who gave it and what it covers.
func (g Grant) Validate() error {
	if g.By == "" {
		return fieldErrorf("by", "who grants is required")
	}
	if _, err := parsePattern(g.Pattern); err != nil {
		return fieldErrorf("pattern", "%q: %v", g.Pattern, err)
	}
	return nil
}

// Allows reports whether the grant covers c. It matches as an allow rule
// does: a Bash grant covers a compound command only if it covers every
// command in it. Specifiers of tools other than the built-in ones are
// matched against the first string argument in sorted key order, as no
// policy's matchArgument is at hand here.
func (g Grant) Allows(c machine.Call) bool {
	if g.ConversationID != "" && g.ConversationID != c.ConversationID {
		return false
	}
	if g.Team != "" && g.Team != c.Team {
		return false
	}
	p, err := parsePattern(g.Pattern)
	if err != nil {
		return false
	}
	args, err := callArguments(c)
	if err != nil {
		return false
	}
	return p.matchCall(newCallSubject(c.ToolName, args, ""), true)
}

// String names the grant in verdict reasons.
func (g Grant) String() string {
	scope := "always"
	if g.ConversationID != "" {
		scope = "session " + g.ConversationID
	}
	return fmt.Sprintf("grant %s %q by %s (%s)", g.ID, g.Pattern, g.By, scope)
}

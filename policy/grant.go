package policy

import (
	"fmt"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// Grant is a human's standing yes: "allow for this session" (ConversationID
// set) or "always allow" (it is not, and Team bounds it). A call it covers
// runs without asking, unless a deny rule, plan mode or the cost limits
// say otherwise, until it expires or is revoked.
type Grant struct {
	ID string `json:"id"`
	// Pattern says what the grant covers, in rule syntax: "Bash(npm test:*)",
	// or a tool's name for every call of it.
	Pattern string `json:"pattern"`
	// ConversationID limits the grant to one conversation: a session grant.
	ConversationID string `json:"conversationId,omitempty"`
	// Team limits the grant to one team's calls.
	Team string `json:"team,omitempty"`
	// TaskID limits a session grant to the calls of one task (a task
	// grant).
	TaskID string `json:"taskId,omitempty"`
	By     string `json:"by"`           // who granted it
	At     int64  `json:"at,omitempty"` // when, epoch milliseconds
	// PendingID is the call whose approval granted it.
	PendingID string `json:"pendingId,omitempty"`
	// ExpiresAt ends the grant (epoch milliseconds); 0: it lasts until
	// revoked.
	ExpiresAt int64 `json:"expiresAt,omitempty"`
	// SingleUse grants are consumed by the one call they let run.
	SingleUse bool `json:"singleUse,omitempty"`
	// Argument is the argument the pattern's specifier reads on a tool
	// that is not built in: the policy's matchArgument for the tool when
	// the grant was made, kept with it so that a later change of the
	// policy neither widens nor breaks it. "" for a built-in tool's
	// pattern, which reads its own argument, and for a pattern without a
	// specifier.
	Argument string `json:"argument,omitempty"`
}

// Live reports whether the grant is in force at now: not expired.
func (g Grant) Live(now time.Time) bool { return g.ExpiresAt == 0 || now.UnixMilli() < g.ExpiresAt }

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

// Allows reports whether the grant covers c, as Covers says, its
// specifier reading g.Argument on a tool that is not built in.
func (g Grant) Allows(c machine.Call) bool {
	if g.ConversationID != "" && g.ConversationID != c.ConversationID {
		return false
	}
	if g.Team != "" && g.Team != c.Team {
		return false
	}
	if g.TaskID != "" && g.TaskID != c.TaskID {
		return false
	}
	ok, err := coversWith(g.Pattern, c, g.Argument)
	return ok && err == nil
}

// Covers reports whether pattern (rule syntax) covers c as an allow rule
// would: a Bash pattern covers a command line only if it covers every
// command in it. No policy's matchArgument is at hand: a specifier on a
// tool that is not built in reads no argument, so it covers no call, and
// neither does one whose call lacks the argument. A pattern that does not
// parse is an error; arguments that are not an object are covered by no
// pattern with a specifier.
func Covers(pattern string, c machine.Call) (bool, error) { return coversWith(pattern, c, "") }

// coversWith is Covers with a specifier on a tool that is not built in
// reading the argument named argument.
func coversWith(pattern string, c machine.Call, argument string) (bool, error) {
	p, err := parsePattern(pattern)
	if err != nil {
		return false, fmt.Errorf("%q: %w", pattern, err)
	}
	args, err := callArguments(c)
	if err != nil {
		return false, nil
	}
	return p.matchCall(newCallSubject(c.ToolName, args, argument), true), nil
}

// NarrowGrantPattern is the pattern of a grant of c narrowed to the calls
// whose argument match covers, in rule syntax: send_email(*@acme-corp.com)
// with argument "to" (the policy's matchArgument for a tool that is not
// built in; a built-in tool reads its own: Bash(git status *)). It must
// cover c itself: an approval grants calls like the one approved.
func NarrowGrantPattern(c machine.Call, match, argument string) (string, error) {
	if _, builtin := builtinArgs[c.ToolName]; !builtin && argument == "" {
		return "", fieldErrorf("grantMatch", "no matchArgument names the argument of %s that a grant could be narrowed by: add matchArgument: {%s: <argument name>} to the policy", c.ToolName, c.ToolName)
	}
	pattern := c.ToolName + "(" + match + ")"
	ok, err := coversWith(pattern, c, argument)
	switch {
	case err != nil:
		return "", fieldErrorf("grantMatch", "%v", err)
	case !ok:
		return "", fieldErrorf("grantMatch", "%s does not cover the call approved: a grant covers calls like it", pattern)
	}
	return pattern, nil
}

// ArgumentName is the argument a specifier on tool reads: a built-in
// tool's own (command, file_path, url, …), else argument (matchArgument's).
func ArgumentName(tool, argument string) string {
	if args, builtin := builtinArgs[tool]; builtin {
		return args[0]
	}
	return argument
}

// String names the grant in verdict reasons.
func (g Grant) String() string {
	scope := "always"
	if g.ConversationID != "" {
		scope = "session " + g.ConversationID
	}
	if g.TaskID != "" {
		scope = "task " + g.TaskID + " of " + scope
	}
	if g.SingleUse {
		scope += ", single use"
	}
	if g.ExpiresAt > 0 {
		scope += ", until " + time.UnixMilli(g.ExpiresAt).UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("grant %s %q by %s (%s)", g.ID, g.Pattern, g.By, scope)
}

// GrantPattern is the pattern a human's "allow for this session" or "always
// allow" of c records: for the built-in tools that take a command, path or
// URL, that exact one (Bash(npm test), Write(src/a.go),
// WebFetch(domain:example.com)); for any other tool, the tool, all of its
// calls. A pattern that would not cover c itself (a compound command line,
// which an allow rule must cover part by part) is refused rather than
// widened: the human approved this call, not the whole tool.
func GrantPattern(c machine.Call) (string, error) {
	pattern, err := grantPattern(c)
	if err != nil {
		return "", err
	}
	g := Grant{Pattern: pattern, By: "-", ConversationID: c.ConversationID, Team: c.Team}
	if err := g.Validate(); err != nil {
		return "", err
	}
	if !g.Allows(c) {
		return "", fieldErrorf("toolArguments", "no pattern covers this %s call alone (%s); approve it once", c.ToolName, pattern)
	}
	return pattern, nil
}

// ShownGrantPattern is GrantPattern's pattern as it reads to someone who
// is shown c's arguments masked: derived in the same way from shown (c
// with its arguments masked), and not checked, since a masked value
// covers nothing. It is for showing, never for recording.
func ShownGrantPattern(shown machine.Call) string {
	pattern, err := grantPattern(shown)
	if err != nil {
		return shown.ToolName
	}
	return pattern
}

// grantPattern derives the pattern of GrantPattern, unchecked.
func grantPattern(c machine.Call) (string, error) {
	if _, builtin := builtinArgs[c.ToolName]; !builtin {
		return c.ToolName, nil
	}
	args, err := callArguments(c)
	if err != nil {
		return "", err
	}
	a := argument(c.ToolName, args, "")
	v := a.value
	if a.why != "" || v == "" {
		return "", fieldErrorf("toolArguments", "%s call has nothing to grant by", c.ToolName)
	}
	return c.ToolName + "(" + v + ")", nil
}

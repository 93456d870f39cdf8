package claudecode

import (
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// The bounds of a hook answer's additionalContext: it reaches the model,
// so it says what decided in a few short lines.
const (
	maxContextLines    = 4
	maxContextLineSize = 300
)

// context is the additionalContext of a decision: lines for the model,
// each at most maxContextLineSize bytes, at most maxContextLines of them.
type contextLines []string

func (c *contextLines) add(format string, args ...any) {
	if len(*c) >= maxContextLines {
		return
	}
	line := fmt.Sprintf(format, args...)
	if len(line) > maxContextLineSize {
		line = line[:maxContextLineSize-len("…")] + "…"
	}
	*c = append(*c, line)
}

func (c contextLines) String() string { return strings.Join(c, "\n") }

// allowedContext says what let a call run: the policy's rule or grant, or
// who approved it, how far, and why.
func allowedContext(o client.Outcome) string {
	var c contextLines
	e := o.Entry
	switch {
	case o.By == "policy" && (e != nil && e.DecidedBy == machine.DecidedByGrant || strings.HasPrefix(o.Reason, "grant ")):
		c.add("toolgate allowed call %s by a grant given earlier: %s.", o.PendingID, o.Reason)
	case o.By == "policy":
		c.add("toolgate allowed call %s by its policy: %s.", o.PendingID, o.Reason)
	default:
		c.add("toolgate allowed call %s: approved by %s%s%s.", o.PendingID, approvedBy(e, o.By), scopeOf(o.Scope), because(o.Reason))
	}
	if o.Edited && e != nil {
		if ed := e.Edited(); ed != nil {
			c.add("The approver edited its input (%s): run the input given, not the one asked for.", strings.Join(ed.Changed, ", "))
		}
	}
	return c.String()
}

// refusedContext says who or what refused a call, why, and how the agent
// could get it allowed.
func refusedContext(rej *client.RejectedError) string {
	var c contextLines
	e := rej.Entry
	switch rej.Kind {
	case client.DeniedByPolicy:
		c.add("toolgate denied call %s by its policy: %s.", e.PendingID, rej.Rule)
		c.add("To get it allowed: the same call is denied again; it runs only if a toolgate admin changes that rule (toolgate policy explain shows it). Ask the user, or do it another way.")
	case client.RejectedByUser:
		c.add("toolgate: call %s was rejected by %s%s.", e.PendingID, rej.By, because(rej.Reason))
		c.add("To get it allowed: ask again only with a changed call that meets the objection, decided by %s.", whoDecides(e))
	case client.RejectedByTimeout:
		c.add("toolgate: call %s timed out: nobody decided by its deadline %s.", e.PendingID, stamp(e.ApprovalTimeoutAt))
		c.add("To get it allowed: ask again when %s can answer (tell the user), or do it another way.", whoDecides(e))
	case client.Cancelled:
		c.add("toolgate: call %s was cancelled by %s%s.", e.PendingID, cmpOr(rej.By, "toolgate"), because(rej.Reason))
	default:
		c.add("toolgate refused call %s (%s)%s.", e.PendingID, rej.Kind, because(rej.Reason))
	}
	return c.String()
}

// pendingContext says who must decide a call that waits for a human, under
// which rule, and by when; then what the hook did (then).
func pendingContext(e *machine.Entry, then string) string {
	var c contextLines
	c.add("toolgate asks a human about call %s (%s): decided by %s; deadline %s.", e.PendingID, e.StatusReason, whoDecides(e), stamp(e.ApprovalTimeoutAt))
	if then != "" {
		c.add("%s", then)
	}
	return c.String()
}

// whoDecides names who may decide e: its one approver, its approvers, or
// toolgate's approvers; and the quorum it needs.
func whoDecides(e *machine.Entry) string {
	who := "toolgate's approvers"
	switch {
	case e == nil:
		return who
	case e.UserIDToApprove != "":
		who = e.UserIDToApprove
	case len(e.Approvers) > 0:
		who = "one of " + strings.Join(e.Approvers, ", ")
	}
	if q := e.Quorum; q != nil && q.Required > 1 {
		who += fmt.Sprintf(" (%d approvals needed)", q.Required)
	}
	return who
}

// approvedBy names who approved e: the quorum's approvers when it had one.
func approvedBy(e *machine.Entry, by string) string {
	if e == nil || e.Quorum == nil || e.Quorum.Required < 2 {
		return by
	}
	var yes []string
	for _, v := range e.Votes {
		if v.Approve {
			yes = append(yes, v.By)
		}
	}
	if len(yes) == 0 {
		return by
	}
	return "a quorum of " + strings.Join(yes, ", ")
}

func scopeOf(s machine.Scope) string {
	switch s {
	case machine.ScopeSession:
		return " for the rest of this session"
	case machine.ScopeAlways:
		return " always (the team's allow rules)"
	case machine.ScopeTask:
		return " for this task"
	}
	return " once"
}

func because(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// stamp is an epoch-ms time as people read it, in UTC.
func stamp(ms int64) string {
	if ms <= 0 {
		return "no deadline"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

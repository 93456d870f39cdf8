package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// timeNow is the clock ages and deadlines are shown against.
var timeNow = time.Now

// cliPrintJSON writes v as indented JSON.
func cliPrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTable writes entries as an aligned table, one line each.
func printTable(w io.Writer, entries []*machine.Entry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tSTATUS\tRISK\tCALLER\tCONVERSATION\tAGE\tDEADLINE\tDESCRIPTION")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			oneLine(e.PendingID, 60), e.ToolName, status(e), cmp.Or(string(e.Risk), "-"), oneLine(e.CallerBotID, 30), oneLine(e.ConversationID, 30),
			shortDuration(now.Sub(time.UnixMilli(e.RequestedAt))), deadline(e, now), oneLine(description(e), 60))
	}
	return tw.Flush()
}

// status is a call's state, and for a pending call under a quorum how
// far it is: PENDING_APPROVAL (1/2).
func status(e *machine.Entry) string {
	if e.Quorum != nil && e.Status == machine.StatePendingApproval {
		return fmt.Sprintf("%s (%d/%d)", e.Status, e.Approvals(), e.Quorum.Required)
	}
	return string(e.Status)
}

// deadline says when a call's next step is due: the approval deadline of a
// pending call, the start of a scheduled one.
func deadline(e *machine.Entry, now time.Time) string {
	var at int64
	switch e.Status {
	case machine.StatePendingApproval:
		at = e.ApprovalTimeoutAt
	case machine.StateScheduled:
		at = e.ScheduledExecutionTime
	}
	if at == 0 {
		return "-"
	}
	d := time.UnixMilli(at).Sub(now)
	switch {
	case e.Status == machine.StateScheduled && d <= 0:
		return "due"
	case e.Status == machine.StateScheduled:
		return "runs in " + shortDuration(d)
	case d <= 0 || e.Overdue:
		return "overdue " + shortDuration(-d)
	}
	return "in " + shortDuration(d)
}

// description is the policy's account of the call, or its arguments.
func description(e *machine.Entry) string {
	if e.Description != "" {
		return e.Description
	}
	return string(e.ToolArguments)
}

// formatMoney prints an amount of money as toolgate counts it, in
// millionths of the currency, as a decimal with no float64 noise: 0.13,
// not 0.13000000000000003; 2, not 2.000000. An amount too large for that
// count (above 9.2e12) is printed as it is.
func formatMoney(x float64) string {
	if m := policy.MicrosOf(x); m != policy.MaxMicros && m != -policy.MaxMicros {
		return m.String()
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// plural is one when n is 1 and many otherwise, so that the words after a
// count agree with it: plural(n, "call differs", "calls differ").
func plural[N ~int | ~int64 | ~uint64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// counted is n followed by plural's words: counted(1, "call", "calls") is
// "1 call".
func counted[N ~int | ~int64 | ~uint64](n N, one, many string) string {
	return fmt.Sprintf("%d %s", n, plural(n, one, many))
}

// oneLine flattens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// shortDuration rounds d to its two largest units: 42s, 4m10s, 2h5m, 3d4h.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// viaGroup says which group of a call's approvers let a person decide:
// " (group:payments-leads)", or "" when they were named.
func viaGroup(g string) string {
	if g == "" {
		return ""
	}
	return " (" + machine.GroupPrefix + g + ")"
}

// printEntry writes everything known of one call, a field a line.
func printEntry(w io.Writer, e *machine.Entry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t%s\n", name, fmt.Sprintf(format, args...))
	}
	when := func(ms int64) string {
		t := time.UnixMilli(ms)
		rel := shortDuration(now.Sub(t)) + " ago"
		if t.After(now) {
			rel = "in " + shortDuration(t.Sub(now))
		}
		return fmt.Sprintf("%s (%s)", t.Local().Format("2006-01-02 15:04:05 MST"), rel)
	}
	if e.Risk != "" {
		// First: what the policy says of the call's risk frames the rest.
		field("Risk", "%s", e.Risk)
	}
	field("ID", "%s", e.PendingID)
	field("Tool", "%s", e.ToolName)
	field("Arguments", "%s", e.ToolArguments)
	if e.SecretsMasked {
		field("Secrets", "masked as %s (show --reveal shows them, recorded)", policy.RedactedValue)
	}
	if e.ArgumentsDigest != "" {
		field("Arguments digest", "%s (what an approval binds)", e.ArgumentsDigest)
	}
	if ed := e.Edited(); ed != nil {
		field("Original arguments", "%s (edited by the approver)", e.OriginalArguments)
		field("Edited", "%s (%s -> %s)", strings.Join(ed.Changed, ", "), ed.From, ed.To)
	}
	if e.Description != "" {
		field("Description", "%s", oneLine(e.Description, 200))
	}
	field("Status", "%s", e.Status)
	if e.StatusReason != "" {
		field("Reason", "%s", e.StatusReason)
	}
	if by := decidedBy(e); by != "" {
		field("Decided by", "%s", by)
	}
	field("Caller", "%s", e.CallerBotID)
	field("Conversation", "%s", e.ConversationID)
	if e.Team != "" {
		field("Team", "%s", e.Team)
	}
	field("Tool call ID", "%s", e.ToolCallID)
	field("Requested", "%s", when(e.RequestedAt))
	if e.Status == machine.StatePendingApproval && e.ApprovalTimeoutAt > 0 {
		what := "rejected"
		switch {
		case e.OnTimeout == machine.TimeoutCancel:
			what = "cancelled"
		case e.OnTimeout == machine.TimeoutApprove:
			what = "approved, unless the policy then says otherwise"
		case !e.AutoRejectOnTimeout:
			what = "flagged overdue"
		}
		field("Deadline", "%s, then %s", when(e.ApprovalTimeoutAt), what)
	}
	switch who := e.Deciders(); {
	case len(who) == 1:
		field("Approver", "%s", who[0])
	case len(who) > 1:
		field("Approvers", "%s", strings.Join(who, ", "))
	}
	if e.Quorum != nil {
		field("Quorum", "%s", e.Needed())
		for _, v := range e.Votes {
			said := map[bool]string{true: "approved", false: "rejected"}[v.Approve]
			field("", "%s %s%s, %s%s", said, v.By, viaGroup(v.ViaGroup), when(v.At), map[bool]string{true: ": " + v.Reason}[v.Reason != ""])
		}
	}
	for i, t := range e.Escalations {
		reached := "at"
		if i < e.Escalated {
			reached = "reached"
		}
		field(map[bool]string{true: "Escalation"}[i == 0], "%s %s: %s", reached, when(t.At), strings.Join(t.To, ", "))
	}
	for i, r := range e.Reviews {
		field(map[bool]string{true: "Reviewed"}[i == 0], "%s", reviewLine(r, when))
	}
	if e.ScheduledExecutionTime > 0 {
		field("Scheduled for", "%s", when(e.ScheduledExecutionTime))
	}
	if e.ApprovedOrRejectedByUserID != "" {
		field("Decided by", "%s%s, %s", e.ApprovedOrRejectedByUserID, viaGroup(e.DeciderViaGroup), when(e.DecisionTime))
	}
	if id := e.DeciderIdentity; id != nil {
		field("Signed in", "with single sign-on: %s", id)
	}
	if e.DecisionScope != "" {
		field("Scope", "%s", e.DecisionScope)
	}
	if e.ExecutionAttempts > 0 {
		field("Attempts", "%d, last %s", e.ExecutionAttempts, when(e.LastAttemptTime))
	}
	if e.Lease != nil {
		field("Running on", "%s, lease until %s", e.Lease.Holder, when(e.Lease.ExpiresAt))
	}
	if len(e.Result) > 0 {
		field("Result", "%s", e.Result)
	}
	if e.Error != "" {
		field("Error", "%s", e.Error)
	}
	if e.OutcomeUnknown {
		field("Outcome", "unknown: the tool may have run; toolgate retry %s runs it once more", e.PendingID)
	}
	if e.RerunOf != "" {
		field("Run again of", "%s, its outcome unknown", e.RerunOf)
	}
	money := func(v float64) string { return strings.TrimSpace(formatMoney(v) + " " + e.Currency) }
	if e.EstimatedCost > 0 {
		field("Estimated cost", "%s", money(e.EstimatedCost))
	}
	if e.Cost > 0 {
		field("Cost", "%s", money(e.Cost))
	}
	if t := e.LastTransition; t != nil {
		field("Last change", "%s by %s, %s", t.Event, t.Actor, when(t.At))
	}
	return tw.Flush()
}

// reviewLine says what an automated reviewer said of a call it left to
// humans: "reviewer:bot escalated, leaning reject, 10:02:03: it touches
// a .env file".
func reviewLine(r machine.Review, when func(int64) string) string {
	said := "escalated"
	if r.Refused != "" {
		said = "approved, refused (" + r.Refused + ")"
	}
	if r.Lean != "" && r.Refused == "" {
		said += ", leaning " + r.Lean
	}
	line := fmt.Sprintf("%s %s, %s", r.By, said, when(r.At))
	if r.Reason != "" {
		line += ": " + oneLine(r.Reason, 200)
	}
	return line
}

// decidedBy says what made e's latest decision: the kind, and who where
// a person or an agent's own answer decided.
func decidedBy(e *machine.Entry) string {
	switch e.DecidedBy {
	case machine.DecidedByHuman, machine.DecidedByQuorum, machine.DecidedByClassifier, machine.DecidedByChannel, machine.DecidedByReviewer:
		if e.ApprovedOrRejectedByUserID != "" {
			return fmt.Sprintf("%s (%s)", e.DecidedBy, e.ApprovedOrRejectedByUserID)
		}
	}
	return string(e.DecidedBy)
}

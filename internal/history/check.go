package history

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Revision is one stored write of a call's entry, as the calls bucket's
// stream holds it.
type Revision struct {
	Seq   uint64
	Entry *machine.Entry
}

// Facts are what toolgate stored and published during the run, read
// once it settled.
type Facts struct {
	// Revisions are every stored write of each call, by pendingId, in
	// order.
	Revisions map[string][]Revision
	// Events counts the events on TOOL_EVENTS by id.
	Events map[string]int
	// ReadAt is when Revisions were read: each call's last revision is a
	// read of its status at that time.
	ReadAt time.Time
	// AnswerWithin is how long after its submit every agent must have
	// had its call's final answer (0: not checked).
	AnswerWithin time.Duration
}

// Rules a Violation names.
const (
	RuleLinearizable = "linearizable"           // the call's operations fit one order of the table's transitions
	RuleTable        = "transitions follow"     // each stored write follows the one before, as the table allows
	RuleOneTerminal  = "one terminal state"     // the call ends in a terminal state, written once
	RuleNoRun        = "no run unless runnable" // no handler of a call rejected, cancelled or never claimed
	RuleRunPerLease  = "one run per lease"      // no more runs than claims; one per fencing token; none while another goes on
	RuleAtMostOnce   = "at most once"           // a tool not declared idempotent is never taken over after a lost lease
	RuleOneEvent     = "one event per transition"
	RuleAnswered     = "every agent answered"
)

// Violation is a promise broken by one call, with what the history and
// the store say of it.
type Violation struct {
	Call    string
	Rule    string
	What    string
	Excerpt []string // the call's operations and stored revisions
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s: %s\n    %s", v.Rule, v.Call, v.What, strings.Join(v.Excerpt, "\n    "))
}

// Report is what Check found.
type Report struct {
	Calls, Ops, Runs int
	// Reruns counts the runs beyond a call's first, each after a claim
	// of its own (a lost lease or a retry); Overlapping, those that
	// started while an earlier run of the call had not ended.
	Reruns, Overlapping int
	Violations          []Violation
}

// Failed reports whether anything was broken.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls, %d operations, %d tool runs (%d again after a claim of their own, %d of them while the earlier run went on): %d violations",
		r.Calls, r.Ops, r.Runs, r.Reruns, r.Overlapping, len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "\n… and %d more", len(r.Violations)-i)
			break
		}
		b.WriteString("\n" + v.String())
	}
	return b.String()
}

// linearizeTimeout bounds porcupine on one call's few operations.
const linearizeTimeout = 10 * time.Second

// Check checks ops and facts: each call's operations are linearizable
// against the transition table (with its stored final status as a read
// at ReadAt); its stored writes follow each other as the table allows
// (a write that did not see the one before is a lost update); it ends in
// one terminal state; no handler ran for a call that was never claimed
// or ended rejected or cancelled; no call of a tool not declared
// idempotent was taken over after a lost lease; no call ran more often
// than it was claimed (a lost lease or a retry each allow one run more), nor twice
// under one fencing token, nor again while an earlier run went on; every transition that has an event has
// exactly one, and there is no other; and each agent's call was answered
// finally within AnswerWithin of its submit.
func Check(ops []*Op, f Facts) *Report {
	r := &Report{Ops: len(ops)}
	byCall := map[string][]*Op{}
	for _, op := range ops {
		byCall[op.Call] = append(byCall[op.Call], op)
	}
	calls := map[string]bool{}
	for id := range byCall {
		calls[id] = true
	}
	for id := range f.Revisions {
		calls[id] = true
	}
	ids := make([]string, 0, len(calls))
	for id := range calls {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	r.Calls = len(ids)
	for _, id := range ids {
		cops, revs := byCall[id], f.Revisions[id]
		slices.SortStableFunc(cops, func(a, b *Op) int { return a.Invoke.Compare(b.Invoke) })
		broke := func(rule, format string, args ...any) {
			r.Violations = append(r.Violations, Violation{Call: id, Rule: rule, What: fmt.Sprintf(format, args...), Excerpt: excerpt(cops, revs)})
		}
		checked := slices.Clone(cops)
		if len(revs) > 0 && !f.ReadAt.IsZero() {
			checked = append(checked, &Op{Call: id, Client: "store", Kind: Read, Invoke: f.ReadAt, Return: f.ReadAt, Status: revs[len(revs)-1].Entry.Status})
		}
		if res := linearizable(checked, linearizeTimeout); res != porcupine.Ok {
			broke(RuleLinearizable, "no order of its operations fits the transition table (porcupine: %s)", res)
		}
		checkRevisions(revs, broke)
		var runs []*Op
		for _, op := range cops {
			if op.Kind == Run {
				runs = append(runs, op)
			}
		}
		r.Runs += len(runs)
		checkRuns(revs, runs, r, broke)
		checkEvents(revs, f.Events, broke)
		if f.AnswerWithin > 0 {
			checkAnswered(cops, f.AnswerWithin, broke)
		}
	}
	// Events for no revision at all (of no call the store holds).
	want := map[string]bool{}
	for _, revs := range f.Revisions {
		for _, rv := range revs {
			for _, ev := range wire.EventsOf(rv.Entry, rv.Seq) {
				want[ev.ID] = true
			}
		}
	}
	var stray []string
	for id := range f.Events {
		if !want[id] {
			stray = append(stray, id)
		}
	}
	slices.Sort(stray)
	for _, id := range stray {
		r.Violations = append(r.Violations, Violation{Call: id, Rule: RuleOneEvent, What: "an event for no stored revision"})
	}
	return r
}

// checkRevisions holds a call's stored writes to the table: the first
// creates it, each later one's transitions start where the one before
// left the entry, and nothing is written after a terminal state, which
// the last one is.
func checkRevisions(revs []Revision, broke func(rule, format string, args ...any)) {
	if len(revs) == 0 {
		return
	}
	prev := machine.State("")
	for _, rv := range revs {
		trs := rv.Entry.Transitions()
		if len(trs) == 0 {
			broke(RuleTable, "revision %d records no transition", rv.Seq)
		}
		if prev.Terminal() {
			broke(RuleOneTerminal, "revision %d written after the terminal %s", rv.Seq, prev)
		}
		at := prev
		for _, tr := range trs {
			to, ok := at.Next(tr.Event)
			switch {
			case tr.From != at:
				broke(RuleTable, "revision %d: %s from %s, but the entry was %s: a write that did not see the one before (a lost update)", rv.Seq, tr.Event, stateName(tr.From), stateName(at))
			case !ok:
				broke(RuleTable, "revision %d: %s may not follow %s", rv.Seq, tr.Event, stateName(at))
			case to != tr.To:
				broke(RuleTable, "revision %d: %s leads to %s, recorded as %s", rv.Seq, tr.Event, to, tr.To)
			}
			at = tr.To
		}
		if at != rv.Entry.Status {
			broke(RuleTable, "revision %d: status %s, its transition leads to %s", rv.Seq, rv.Entry.Status, at)
		}
		prev = rv.Entry.Status
	}
	if !prev.Terminal() {
		broke(RuleOneTerminal, "ends %s, not in a terminal state", prev)
	}
}

func stateName(s machine.State) string { return cmpOr(string(s), "none") }

// checkRuns holds a call's tool runs to its claims.
func checkRuns(revs []Revision, runs []*Op, r *Report, broke func(rule, format string, args ...any)) {
	claims, lost := 0, 0
	var final machine.State
	idempotent := false
	for _, rv := range revs {
		idempotent = idempotent || rv.Entry.Idempotent
		for _, tr := range rv.Entry.Transitions() {
			switch tr.Event {
			case machine.EventStart:
				claims++
			case machine.EventReclaim:
				claims++
				if tr.Reason != "retry" {
					lost++
				}
			}
		}
		final = rv.Entry.Status
	}
	if lost > 0 && !idempotent {
		broke(RuleAtMostOnce, "taken over %d times after a lost lease, and its tool is not declared idempotent", lost)
	}
	if len(runs) == 0 {
		return
	}
	switch {
	case claims == 0:
		broke(RuleNoRun, "the handler ran %d times; the call was never claimed (it is %s)", len(runs), stateName(final))
	case final == machine.StateRejectedByUser || final == machine.StateRejectedByTimeout || final == machine.StateRejectedByPolicy || final == machine.StateCancelled:
		broke(RuleNoRun, "the handler ran %d times; the call ended %s", len(runs), final)
	}
	if len(runs) > claims {
		broke(RuleRunPerLease, "the handler ran %d times under %d claims (%d lost leases)", len(runs), claims, lost)
	}
	tokens := map[string]int{}
	for _, run := range runs {
		if run.Token != "" {
			tokens[run.Token]++
		}
	}
	for tok, n := range tokens {
		if n > 1 {
			broke(RuleRunPerLease, "the handler ran %d times with fencing token %s", n, tok)
		}
	}
	slices.SortFunc(runs, func(a, b *Op) int { return a.Invoke.Compare(b.Invoke) })
	r.Reruns += len(runs) - 1
	for i := 1; i < len(runs); i++ {
		for _, earlier := range runs[:i] {
			if !earlier.Answered() || earlier.Return.After(runs[i].Invoke) {
				r.Overlapping++
				broke(RuleRunPerLease, "%s ran the handler again (token %q) while %s's run (token %q) went on: the earlier run was not stopped before its lease ran out",
					runs[i].Client, runs[i].Token, earlier.Client, earlier.Token)
				break
			}
		}
	}
}

// checkEvents holds a call's events to its revisions: one for each
// transition that has one.
func checkEvents(revs []Revision, events map[string]int, broke func(rule, format string, args ...any)) {
	if events == nil {
		return
	}
	for _, rv := range revs {
		for _, ev := range wire.EventsOf(rv.Entry, rv.Seq) {
			if n := events[ev.ID]; n != 1 {
				broke(RuleOneEvent, "revision %d (%s): %d events with id %s", rv.Seq, ev.Event, n, ev.ID)
			}
		}
	}
}

// checkAnswered holds each agent's submit to a final answer within d:
// the submit's own, when the call ended at once, or a read's.
func checkAnswered(ops []*Op, d time.Duration, broke func(rule, format string, args ...any)) {
	for _, sub := range ops {
		if sub.Kind != Submit || !sub.Answered() || sub.Refused {
			continue
		}
		if sub.Status.Terminal() {
			continue
		}
		answered := false
		for _, op := range ops {
			if op.Kind == Read && op.Answered() && op.Status.Terminal() && !op.Return.After(sub.Invoke.Add(d)) {
				answered = true
			}
		}
		if !answered {
			broke(RuleAnswered, "%s submitted at %s had no final answer within %s", sub.Client, sub.Invoke.UTC().Format("15:04:05.000"), d)
		}
	}
}

// excerpt is the part of the history that concerns one call: its
// operations, then its stored revisions.
func excerpt(ops []*Op, revs []Revision) []string {
	var out []string
	for _, op := range ops {
		out = append(out, "op  "+op.String())
	}
	for _, rv := range revs {
		e := rv.Entry
		var trs []string
		for _, tr := range e.Transitions() {
			trs = append(trs, fmt.Sprintf("%s %s→%s by %s%s", tr.Event, stateName(tr.From), tr.To, tr.Actor, reasonOf(tr)))
		}
		at := ""
		if t := e.LastTransition; t != nil {
			at = time.UnixMilli(t.At).UTC().Format("15:04:05.000") + " "
		}
		out = append(out, fmt.Sprintf("rev %d %s%s (attempts %d)", rv.Seq, at, strings.Join(trs, ", "), e.ExecutionAttempts))
	}
	return out
}

func reasonOf(tr *machine.Transition) string {
	if tr.Reason == "" {
		return ""
	}
	return fmt.Sprintf(" (%s)", tr.Reason)
}

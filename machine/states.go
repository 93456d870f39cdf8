package machine

import (
	"fmt"
	"slices"
	"strings"
)

// State is where a tool call stands.
type State string

// The states of a tool call. Every entry is in exactly one.
const (
	StatePendingApproval   State = "PENDING_APPROVAL"
	StateScheduled         State = "SCHEDULED_FOR_EXECUTION"
	StateApproved          State = "APPROVED_READY_FOR_EXECUTION"
	StateRejectedByUser    State = "REJECTED_BY_USER"
	StateRejectedByTimeout State = "REJECTED_BY_TIMEOUT"
	StateRejectedByPolicy  State = "REJECTED_BY_POLICY"
	StateExecuting         State = "EXECUTING"
	StateCompletedSuccess  State = "COMPLETED_SUCCESS"
	StateCompletedFailure  State = "COMPLETED_FAILURE"
	StateCancelled         State = "CANCELLED_BY_SYSTEM"
)

// stateNone is where an entry is before it exists: the source of the three
// creation events, drawn as [*] in the diagram.
const stateNone State = ""

// States lists every state in the order of the lifecycle.
var States = []State{
	StatePendingApproval, StateScheduled, StateApproved,
	StateRejectedByUser, StateRejectedByTimeout, StateRejectedByPolicy,
	StateExecuting, StateCompletedSuccess, StateCompletedFailure, StateCancelled,
}

// Terminal reports whether no event can move an entry out of s.
func (s State) Terminal() bool {
	for _, t := range transitions {
		if slices.Contains(t.From, s) {
			return false
		}
	}
	return s.Valid()
}

// Valid reports whether s is one of States.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Next reports where ev leads from s, as the transition table says, and
// false when ev may not follow s. The zero State is before an entry
// exists: only the events that create one follow it. A checker of
// recorded histories steps its model with it.
func (s State) Next(ev Event) (State, bool) {
	to, err := validate(s, ev)
	return to, err == nil
}

// Event is a command that moves an entry from one state to the next.
type Event string

// The events. Each has exactly one destination state; see the transition table.
const (
	EventAsk      Event = "ask"      // created, a human must decide
	EventSchedule Event = "schedule" // created, runs now or after a delay
	EventDeny     Event = "deny"     // created, refused by policy
	EventApprove  Event = "approve"
	// EventVote records an approval of a call under a quorum that does
	// not reach it yet (or, under RejectMajority, a rejection short of the
	// majority): the call stays pending.
	EventVote   Event = "vote"
	EventReject Event = "reject"
	// EventEscalate widens who may decide a call nobody has decided by
	// the next escalation tier's time, and tells them.
	EventEscalate Event = "escalate"
	EventTimeout  Event = "timeout" // nobody answered before approvalTimeoutAt
	// EventOverdue flags a call nobody answered in time whose policy does
	// not reject it then: it stays pending, and the flag is raised once.
	EventOverdue Event = "overdue"
	// EventRemind reminds the approvers of a call still pending a while
	// before its deadline (reminderAt), once.
	EventRemind  Event = "remind"
	EventCancel  Event = "cancel"
	EventStart   Event = "start"   // an executor claimed it
	EventReclaim Event = "reclaim" // the previous executor's lease ran out
	// EventHeartbeat renews a running call's lease. It is silent: it
	// changes nothing anyone outside watches.
	EventHeartbeat Event = "heartbeat"
	EventSucceed   Event = "succeed"
	EventFail      Event = "fail"
	// EventRespond ends a pending call with a result an approver
	// supplied instead of running the tool (a respondable tool's): the
	// executor never sees it.
	EventRespond Event = "respond"

	// EventReview records an automated reviewer leaving a pending call
	// to humans (it escalated, or its approval was refused): the call
	// stays pending.
	EventReview Event = "review"
)

// transition is one row of the table: ev moves an entry in any of From to
// To. What the rest of toolgate says about an event (its subject, whether
// humans hear of it, which metrics it feeds) derives from its row, so a new
// event is described once.
type transition struct {
	Event Event
	From  []State
	To    State
	Label string // for the diagram
	// Name is the event's public name, the last token of the subject it is
	// published on. Events that are one thing to the outside share a name:
	// an overdue call is a timeout that did not reject, a reclaim an
	// execution that starts again.
	Name  string
	Flags flags
}

// flags say who hears of an event beyond its subscribers.
type flags uint8

const (
	// notify marks an event humans are told of: it asks them to decide,
	// or settles or flags a call that waits for them.
	notify flags = 1 << iota
	// silent marks an event nothing is published for, so it has no Name:
	// it changes nothing anyone watches (a renewed lease).
	silent
)

// transitions is the one place that says what may follow what, and what
// each event is to the outside.
var transitions = []transition{
	{EventAsk, []State{stateNone}, StatePendingApproval, "policy asks a human", "approval_required", notify},
	{EventSchedule, []State{stateNone}, StateScheduled, "policy runs it now or after a delay", "scheduled_execution", 0},
	{EventDeny, []State{stateNone}, StateRejectedByPolicy, "policy denies it", "policy_denied", 0},
	{EventApprove, []State{StatePendingApproval}, StateApproved, "approved", "approval_granted", notify},
	{EventVote, []State{StatePendingApproval}, StatePendingApproval, "an approval short of the quorum", "approval_progress", notify},
	{EventReject, []State{StatePendingApproval}, StateRejectedByUser, "rejected", "approval_rejected", notify},
	{EventEscalate, []State{StatePendingApproval}, StatePendingApproval, "nobody answered: the next tier may decide", "approval_escalated", notify},
	{EventTimeout, []State{StatePendingApproval}, StateRejectedByTimeout, "nobody answered in time", "approval_timeout", notify},
	{EventOverdue, []State{StatePendingApproval}, StatePendingApproval, "nobody answered in time, kept pending", "approval_overdue", notify},
	{EventRemind, []State{StatePendingApproval}, StatePendingApproval, "reminded before the deadline", "approval_reminder", notify},
	{EventCancel, []State{StatePendingApproval, StateScheduled, StateApproved}, StateCancelled, "cancelled", "cancelled", notify},
	{EventStart, []State{StateScheduled, StateApproved}, StateExecuting, "executor claims it", "execution_started", 0},
	{EventReclaim, []State{StateExecuting}, StateExecuting, "lease lost, claimed again", "execution_started", 0},
	{EventHeartbeat, []State{StateExecuting}, StateExecuting, "lease renewed", "", silent},
	{EventSucceed, []State{StateExecuting}, StateCompletedSuccess, "tool succeeded", "execution_succeeded", 0},
	{EventFail, []State{StateExecuting}, StateCompletedFailure, "tool failed", "execution_failed", 0},
	{EventRespond, []State{StatePendingApproval}, StateCompletedSuccess, "an approver answers with the result", "approval_responded", notify},
	{EventReview, []State{StatePendingApproval}, StatePendingApproval, "a reviewer leaves it to humans", "approval_reviewed", 0},
}

// Events lists every event in table order.
func Events() []Event {
	evs := make([]Event, len(transitions))
	for i, t := range transitions {
		evs[i] = t.Event
	}
	return evs
}

// row returns ev's row of the table, nil if ev is no event.
func (ev Event) row() *transition {
	for i := range transitions {
		if transitions[i].Event == ev {
			return &transitions[i]
		}
	}
	return nil
}

// Target returns the state ev leads to, and whether ev is an event at all.
func (ev Event) Target() (State, bool) {
	if t := ev.row(); t != nil {
		return t.To, true
	}
	return "", false
}

// PublicName returns the name ev is known by outside toolgate (the last
// token of the subject it is published on, e.g. "approval_required"), and
// false for a silent event or one that is no event. Several events may
// share a name.
func (ev Event) PublicName() (string, bool) {
	if t := ev.row(); t != nil && t.Name != "" {
		return t.Name, true
	}
	return "", false
}

// Silent reports whether nothing is published for ev: it is an event of
// the table that no one outside is told of, such as a heartbeat.
func (ev Event) Silent() bool {
	t := ev.row()
	return t != nil && t.Flags&silent != 0
}

// Notifies reports whether humans are told of ev: it asks them to decide,
// or settles or flags a call that waits for them. It speaks of the kind of
// event, not of one transition: a cancel of a call that was scheduled, not
// pending, concerns no human, and a notifier tells nobody of it.
func (ev Event) Notifies() bool {
	t := ev.row()
	return t != nil && t.Flags&notify != 0
}

// Diagram renders the transition table as a mermaid state diagram, the one
// docs/architecture.md shows.
func Diagram() string {
	name := func(s State) string {
		if s == stateNone {
			return "[*]"
		}
		return string(s)
	}
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	for _, t := range transitions {
		for _, from := range t.From {
			fmt.Fprintf(&b, "    %s --> %s: %s (%s)\n", name(from), name(t.To), t.Event, t.Label)
		}
	}
	for _, s := range States {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	return b.String()
}

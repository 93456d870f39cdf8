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

// Event is a command that moves an entry from one state to the next.
type Event string

// The events. Each has exactly one destination state; see the transition table.
const (
	EventAsk      Event = "ask"      // created, a human must decide
	EventSchedule Event = "schedule" // created, runs now or after a delay
	EventDeny     Event = "deny"     // created, refused by policy
	EventApprove  Event = "approve"
	EventReject   Event = "reject"
	EventTimeout  Event = "timeout" // nobody answered before approvalTimeoutAt
	// EventOverdue flags a call nobody answered in time whose policy does
	// not reject it then: it stays pending, and the flag is raised once.
	EventOverdue Event = "overdue"
	EventCancel  Event = "cancel"
	EventStart   Event = "start"   // an executor claimed it
	EventReclaim Event = "reclaim" // the previous executor's lease ran out
	// EventHeartbeat renews a running call's lease. It is not an event
	// anyone is told of: the relay publishes nothing for it.
	EventHeartbeat Event = "heartbeat"
	EventSucceed   Event = "succeed"
	EventFail      Event = "fail"
)

// transition is one row of the table: ev moves an entry in any of From to To.
type transition struct {
	Event Event
	From  []State
	To    State
	Label string // for the diagram
}

// transitions is the one place that says what may follow what.
var transitions = []transition{
	{EventAsk, []State{stateNone}, StatePendingApproval, "policy asks a human"},
	{EventSchedule, []State{stateNone}, StateScheduled, "policy runs it now or after a delay"},
	{EventDeny, []State{stateNone}, StateRejectedByPolicy, "policy denies it"},
	{EventApprove, []State{StatePendingApproval}, StateApproved, "approved"},
	{EventReject, []State{StatePendingApproval}, StateRejectedByUser, "rejected"},
	{EventTimeout, []State{StatePendingApproval}, StateRejectedByTimeout, "nobody answered in time"},
	{EventOverdue, []State{StatePendingApproval}, StatePendingApproval, "nobody answered in time, kept pending"},
	{EventCancel, []State{StatePendingApproval, StateScheduled, StateApproved}, StateCancelled, "cancelled"},
	{EventStart, []State{StateScheduled, StateApproved}, StateExecuting, "executor claims it"},
	{EventReclaim, []State{StateExecuting}, StateExecuting, "lease lost, claimed again"},
	{EventHeartbeat, []State{StateExecuting}, StateExecuting, "lease renewed"},
	{EventSucceed, []State{StateExecuting}, StateCompletedSuccess, "tool succeeded"},
	{EventFail, []State{StateExecuting}, StateCompletedFailure, "tool failed"},
}

// Events lists every event in table order.
func Events() []Event {
	evs := make([]Event, len(transitions))
	for i, t := range transitions {
		evs[i] = t.Event
	}
	return evs
}

// Target returns the state ev leads to, and whether ev is an event at all.
func (ev Event) Target() (State, bool) {
	for _, t := range transitions {
		if t.Event == ev {
			return t.To, true
		}
	}
	return "", false
}

// Diagram renders the transition table as a mermaid state diagram, the one
// shown in the README.
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

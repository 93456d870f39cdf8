package wire

import "github.com/toolgate/toolgate/machine"

// Names of the JetStream assets toolgate provisions.
const (
	CallsBucket      = "tool_calls"      // KV: the entries, source of truth
	EventsStream     = "TOOL_EVENTS"     // every transition, one subject per kind
	WorkStream       = "TOOL_WORK"       // runnable calls, work-queue retention
	DeadLetterStream = "TOOL_DEADLETTER" // messages a consumer gave up on
	NotifyStream     = "TOOL_NOTIFY"     // notifications to deliver, one subject per channel
)

// Buckets beside the entries'.
const (
	PoliciesBucket = "tool_policies" // the policy document, and where it was loaded from
	GrantsBucket   = "tool_grants"   // session grants, by conversation
	BudgetsBucket  = "tool_budgets"  // spending per team and day
)

// Subjects of the events, one per kind of transition.
const (
	SubjectApprovalRequired   = "tool.approval_required"
	SubjectScheduledExecution = "tool.scheduled_execution"
	SubjectPolicyDenied       = "tool.policy_denied"
	SubjectApprovalGranted    = "tool.approval_granted"
	SubjectApprovalRejected   = "tool.approval_rejected"
	SubjectApprovalTimeout    = "tool.approval_timeout"
	SubjectCancelled          = "tool.cancelled"
	SubjectExecutionStarted   = "tool.execution_started"
	SubjectExecutionSucceeded = "tool.execution_succeeded"
	SubjectExecutionFailed    = "tool.execution_failed"
)

// eventSubjects maps each event to its subject. A reclaim is an execution
// that starts again, so it shares execution_started; an overdue call is a
// timeout that did not reject, so it shares approval_timeout. A heartbeat
// has no subject: the relay publishes nothing for it.
var eventSubjects = map[machine.Event]string{
	machine.EventAsk:      SubjectApprovalRequired,
	machine.EventSchedule: SubjectScheduledExecution,
	machine.EventDeny:     SubjectPolicyDenied,
	machine.EventApprove:  SubjectApprovalGranted,
	machine.EventReject:   SubjectApprovalRejected,
	machine.EventTimeout:  SubjectApprovalTimeout,
	machine.EventOverdue:  SubjectApprovalTimeout,
	machine.EventCancel:   SubjectCancelled,
	machine.EventStart:    SubjectExecutionStarted,
	machine.EventReclaim:  SubjectExecutionStarted,
	machine.EventSucceed:  SubjectExecutionSucceeded,
	machine.EventFail:     SubjectExecutionFailed,
}

// EventSubject returns the subject an event is published on, and false for
// an event that has none.
func EventSubject(ev machine.Event) (string, bool) {
	s, ok := eventSubjects[ev]
	return s, ok
}

// EventSubjects lists every event subject once, in table order: the
// subjects of the TOOL_EVENTS stream.
func EventSubjects() []string {
	var subs []string
	seen := map[string]bool{}
	for _, ev := range machine.Events() {
		if s, ok := eventSubjects[ev]; ok && !seen[s] {
			seen[s] = true
			subs = append(subs, s)
		}
	}
	return subs
}

// WorkSubject is where runnable calls of one tool are queued.
func WorkSubject(tool string) string { return "tool.work." + tool }

// NotifySubject is where the notifications to one channel wait.
func NotifySubject(channelKey string) string { return "tool.notify." + channelKey }

// DeadLetterSubject is where a consumer puts a message it gave up on.
func DeadLetterSubject(consumer string) string { return "tool.deadletter." + consumer }

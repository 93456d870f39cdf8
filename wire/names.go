package wire

import (
	"slices"

	"github.com/toolgate/toolgate/machine"
)

// Names of the JetStream assets toolgate provisions.
const (
	CallsBucket      = "tool_calls"      // KV: the entries, source of truth
	EventsStream     = "TOOL_EVENTS"     // every transition, one subject per kind
	DeadLetterStream = "TOOL_DEADLETTER" // messages a consumer gave up on
	NotifyStream     = "TOOL_NOTIFY"     // notifications to deliver, one subject per channel
	// ArchiveStream keeps the finished calls that left tool_calls after
	// the retention window, each with its history: one subject per call.
	ArchiveStream = "TOOL_ARCHIVE"
)

// Buckets beside the entries'.
const (
	PoliciesBucket = "tool_policies" // the policy document, and where it was loaded from
	GrantsBucket   = "tool_grants"   // session grants, by conversation
	BudgetsBucket  = "tool_budgets"  // spending per team and day
	// AnalyticsBucket holds the analytics' aggregates.
	AnalyticsBucket = "tool_analytics"
	// IdentitiesBucket holds the credentials issued, by public key.
	IdentitiesBucket = "tool_identities"
	// DecisionTokensBucket holds the one-time decision tokens notifications
	// carry, by the SHA-256 of the token.
	DecisionTokensBucket = "tool_decision_tokens"
	// RateLimitsBucket holds the rate rules' counters: the slots taken in
	// each rule's window, per team, conversation, caller or for all.
	RateLimitsBucket = "tool_rate_limits"
)

// Subjects of the events, one per public name in machine's transition
// table. They are the contract subscribers code against; EventSubject
// derives the same strings from the table, and a test holds them equal.
const (
	SubjectApprovalRequired   = "tool.approval_required"
	SubjectScheduledExecution = "tool.scheduled_execution"
	SubjectPolicyDenied       = "tool.policy_denied"
	SubjectApprovalGranted    = "tool.approval_granted"
	SubjectApprovalProgress   = "tool.approval_progress"
	SubjectApprovalRejected   = "tool.approval_rejected"
	SubjectApprovalEscalated  = "tool.approval_escalated"
	SubjectApprovalTimeout    = "tool.approval_timeout"
	SubjectApprovalOverdue    = "tool.approval_overdue"
	SubjectApprovalReminder   = "tool.approval_reminder"
	SubjectCancelled          = "tool.cancelled"
	SubjectExecutionStarted   = "tool.execution_started"
	SubjectExecutionSucceeded = "tool.execution_succeeded"
	SubjectExecutionFailed    = "tool.execution_failed"
	// SubjectApprovalResponded: an approver answered the call with the
	// tool's result instead of running it.
	SubjectApprovalResponded = "tool.approval_responded"
	// SubjectApprovalReviewed: an automated reviewer left a pending call
	// to humans (machine.EventReview).
	SubjectApprovalReviewed = "tool.approval_reviewed"
)

// eventPrefix is the contract's namespace for events: the table names only
// the last token, so that machine knows nothing of subjects.
const eventPrefix = "tool."

// EventSubject returns the subject an event is published on, and false for
// a silent event (a heartbeat), which has none, or one that is no event.
func EventSubject(ev machine.Event) (string, bool) {
	name, ok := ev.PublicName()
	if !ok {
		return "", false
	}
	return eventPrefix + name, true
}

// EventSubjects lists every event subject once, in table order: the
// subjects of the TOOL_EVENTS stream.
func EventSubjects() []string {
	return EventSubjectsOf(func(machine.Event) bool { return true })
}

// EventSubjectsOf lists once, in table order, the subjects of the events
// keep accepts: what a consumer that wants only those filters on. A
// subject is listed if any of its events is kept, so the consumer may
// still receive events it does not want, which share a subject with one
// it does.
func EventSubjectsOf(keep func(machine.Event) bool) []string {
	var subs []string
	for _, ev := range machine.Events() {
		if s, ok := EventSubject(ev); ok && keep(ev) && !slices.Contains(subs, s) {
			subs = append(subs, s)
		}
	}
	return subs
}

// internalPrefix is the namespace of toolgate's own queues, apart from the
// events' tool.*: `nats sub 'tool.>'` shows exactly the events.
const internalPrefix = "toolgate."

// NotifySubject is where the notifications to one channel wait.
func NotifySubject(channelKey string) string { return internalPrefix + "notify." + channelKey }

// ArchiveSubject is where the archive keeps one finished call (an
// ArchivedCall); ArchiveSubject(machine.ConversationKey(c) + ".*") are a
// conversation's.
func ArchiveSubject(pendingID string) string { return internalPrefix + "archive." + pendingID }

// DeadLetterSubject is where a consumer puts a message it gave up on.
func DeadLetterSubject(consumer string) string { return internalPrefix + "deadletter." + consumer }

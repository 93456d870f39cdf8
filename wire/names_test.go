package wire_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The subjects are derived from machine's table, but subscribers outside
// toolgate code against these strings: a renamed row must fail here, not
// in someone's agent.
func TestEventSubject_TheContract(t *testing.T) {
	t.Parallel()
	contract := map[machine.Event]string{
		machine.EventAsk:      "tool.approval_required",
		machine.EventSchedule: "tool.scheduled_execution",
		machine.EventDeny:     "tool.policy_denied",
		machine.EventApprove:  "tool.approval_granted",
		machine.EventVote:     "tool.approval_progress",
		machine.EventReject:   "tool.approval_rejected",
		machine.EventEscalate: "tool.approval_escalated",
		machine.EventTimeout:  "tool.approval_timeout",
		machine.EventOverdue:  "tool.approval_overdue",
		machine.EventRemind:   "tool.approval_reminder",
		machine.EventCancel:   "tool.cancelled",
		machine.EventStart:    "tool.execution_started",
		machine.EventReclaim:  "tool.execution_started",
		machine.EventSucceed:  "tool.execution_succeeded",
		machine.EventFail:     "tool.execution_failed",
		machine.EventRespond:  "tool.approval_responded",
		machine.EventReview:   "tool.approval_reviewed",
	}
	for _, ev := range machine.Events() {
		got, ok := wire.EventSubject(ev)
		want, published := contract[ev]
		assert.Equal(t, published, ok, "%s published", ev)
		assert.Equal(t, want, got, ev)
	}
	_, ok := wire.EventSubject(machine.EventHeartbeat)
	assert.False(t, ok, "the relay publishes nothing for a heartbeat")
	_, ok = wire.EventSubject("BOGUS")
	assert.False(t, ok)

	assert.Equal(t, []string{
		wire.SubjectApprovalRequired, wire.SubjectScheduledExecution, wire.SubjectPolicyDenied,
		wire.SubjectApprovalGranted, wire.SubjectApprovalProgress, wire.SubjectApprovalRejected, wire.SubjectApprovalEscalated, wire.SubjectApprovalTimeout,
		wire.SubjectApprovalOverdue, wire.SubjectApprovalReminder, wire.SubjectCancelled, wire.SubjectExecutionStarted, wire.SubjectExecutionSucceeded,
		wire.SubjectExecutionFailed, wire.SubjectApprovalResponded, wire.SubjectApprovalReviewed,
	}, wire.EventSubjects(), "TOOL_EVENTS' subjects, each once, in table order")
}

func TestEventSubjectsOf_ListsASharedSubjectOnce(t *testing.T) {
	t.Parallel()
	assert.Equal(t, []string{wire.SubjectExecutionStarted},
		wire.EventSubjectsOf(func(ev machine.Event) bool {
			return ev == machine.EventStart || ev == machine.EventReclaim
		}))
	assert.Empty(t, wire.EventSubjectsOf(machine.Event.Silent))
}

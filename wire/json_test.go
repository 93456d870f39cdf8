package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// sameAsEncodingJSON holds wire.Unmarshal into a new T to encoding/json's
// result for each document.
func sameAsEncodingJSON[T any](t *testing.T, docs ...string) {
	t.Helper()
	for _, data := range docs {
		var want, got T
		require.NoError(t, json.Unmarshal([]byte(data), &want))
		require.NoError(t, wire.Unmarshal([]byte(data), &got), data)
		assert.Equal(t, want, got, data)
	}
	var v T
	assert.Error(t, wire.Unmarshal([]byte(`{"pendingId":`), &v))
}

// An entry and an event decode as encoding/json decodes them, every field
// set or absent, null where it may be, names in another case, and what
// json/v2 refuses (invalid UTF-8, a name twice) or does not know.
func TestUnmarshal_AsEncodingJSON(t *testing.T) {
	full := machine.Entry{
		PendingID: "conv-1.call-1", ToolCallID: "call-1", ToolName: "send_email",
		ToolArguments: json.RawMessage(`{ "to" : "ops@example.com", "n": [1, 2.5e3, null] }`), OriginalArguments: json.RawMessage(`{"to":"x"}`),
		ArgumentsDigest: "sha256:ab", PolicyRevision: 7, Risk: machine.RiskHigh, CallerBotID: "agent", ConversationID: "conv-1", RequestedAt: 1,
		Status: machine.StateExecuting, StatusReason: "why", ExecutionAttempts: 2, LastAttemptTime: 3, ScheduledExecutionTime: 4,
		ApprovalTimeoutAt: 5, ReminderAt: 6, Reminded: true, Overdue: true, AutoRejectOnTimeout: true, UserIDToApprove: "ann",
		Approvers: []string{"ann", "bob"}, Quorum: &machine.Quorum{Required: 2, Of: []string{"ann", "bob"}},
		Votes: []machine.Vote{{By: "ann", Approve: true, At: 8, Reason: "ok"}}, Escalations: []machine.Escalation{{At: 9, To: []string{"cto"}}},
		Escalated: 1, ApprovedOrRejectedByUserID: "ann", DecisionTime: 10, DecisionScope: machine.ScopeTask,
		Result: json.RawMessage(`{"sent":true}`), Error: "boom", Cost: 0.25, Team: "support", TaskID: "t", EstimatedCost: 0.5,
		PermissionMode: "default", Description: "mail \u00e9\u2028<&>", MaxExecutionAttempts: 3, CostReserved: 0.5, CostDay: "2026-11-24",
		Lease:          &machine.Lease{Holder: "x", ExpiresAt: 11},
		Receipts:       []machine.Receipt{{Seq: 1, PendingID: "conv-1.call-1", Event: machine.EventAsk, To: machine.StatePendingApproval, Actor: "policy", At: 1, Key: "U", Sig: "s"}},
		LastTransition: &machine.Transition{Event: machine.EventStart, From: machine.StateApproved, To: machine.StateExecuting, Actor: "x", At: 12},
	}
	entry, err := json.Marshal(full)
	require.NoError(t, err)
	sameAsEncodingJSON[machine.Entry](t,
		string(entry),
		`{"pendingId":"a.b","status":"PENDING_APPROVAL","toolArguments":null,"result":null,"lease":null,"receipts":null,"approvers":null}`,
		`{"PENDINGID":"a.b","Status":"PENDING_APPROVAL","toolarguments":{"x":1},"LastTransition":{"Event":"ask","AT":3}}`,
		"{\"pendingId\":\"a.b\",\"status\":\"PENDING_APPROVAL\",\"description\":\"\xff\"}",
		`{"pendingId":"a.b","status":"PENDING_APPROVAL","approvalTimeoutAt":50,"approvalTimeoutAt":100}`,
		`{"pendingId":"a.b","lease":{"holder":"x","expiresAt":1},"lease":{"expiresAt":3},"approvers":["a"],"approvers":["b","c"]}`,
		"{\"pendingId\":\"a.b\",\"receipts\":[{\"actor\":\"\xc3\x28\",\"sig\":\"\xed\xa0\x80\"}],\"toolArguments\":{\"k\":\"\xff\"}}",
		`{"pendingId":"a.b","unknown":{"deep":[1,{"x":null}]},"cost":1e-3}`,
	)
	receipt := full.Receipts[0]
	event, err := json.Marshal(wire.Event{V: wire.EventVersion, ID: "conv-1.call-1:7", Type: wire.SubjectExecutionStarted, Event: machine.EventStart,
		From: machine.StateApproved, To: machine.StateExecuting, Actor: "x", Reason: "r", At: 12, Revision: 7, Receipt: &receipt, Entry: &full})
	require.NoError(t, err)
	sameAsEncodingJSON[wire.Event](t,
		string(event),
		`{"v":1,"id":"a.b:1","type":"tool.approval_required","event":"ask","to":"PENDING_APPROVAL","revision":1,"receipt":null,"entry":null}`,
		`{"V":1,"ID":"a.b:1","Revision":2,"Entry":{"PendingId":"a.b","STATUS":"APPROVED_READY_FOR_EXECUTION"}}`,
		`{"revision":1,"revision":2,"entry":{"pendingId":"a.b"}}`,
		`{"entry":{"pendingId":"a.b","cost":1},"entry":{"status":"APPROVED_READY_FOR_EXECUTION"},"receipt":{"seq":1},"receipt":null}`,
	)
}

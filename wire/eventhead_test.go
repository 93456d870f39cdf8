package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// An event's head: each of its fields, at any depth, is a field of
// wire.Event (or of the entry, or of a vote) of the same name, and
// decodes the same value from the event's JSON. Its readers read nothing
// else, since they take an EventHead.
func TestEventHead_DecodesAsTheEvent(t *testing.T) {
	full := wire.Event{
		V: wire.EventVersion, ID: "p1:7", Type: "tool.approval_granted", Event: machine.EventVote,
		From: machine.StatePendingApproval, To: machine.StatePendingApproval, Actor: "alice", Reason: "fine", DecidedBy: machine.DecidedByQuorum,
		At: 1_700_000_000_123, Revision: 7,
		Receipt: &machine.Receipt{Seq: 2, PendingID: "p1", Event: machine.EventVote, Actor: "alice"},
		Entry: &machine.Entry{
			PendingID: "p1", ToolCallID: "c1", ToolName: "deploy", ToolArguments: json.RawMessage(`{"a":1}`),
			CallerBotID: "agent", ConversationID: "conv", RequestedAt: 1_700_000_000_000, Status: machine.StatePendingApproval,
			ApprovalTimeoutAt: 1_700_000_300_000, ApprovedOrRejectedByUserID: "bob", DecisionTime: 1_700_000_000_100,
			LastAttemptTime: 1_700_000_000_110,
			Votes:           []machine.Vote{{By: "carol", Approve: false, At: 1_700_000_000_050, Reason: "no"}, {By: "alice", Approve: true, At: 1_700_000_000_120}},
			Result:          json.RawMessage(`{"r":2}`), Cost: 1.5, Team: "ops", EstimatedCost: 2.5, Description: "deploys",
			CostReserved: 2.5, CostDay: "2023-11-14",
			Reviews: []machine.Review{{By: "reviewer:bot", Answer: machine.ReviewEscalate, Lean: machine.ReviewReject, Reason: ".env", At: 1_700_000_000_060}},
		},
	}
	data, err := json.Marshal(full)
	require.NoError(t, err)
	head, err := wire.DecodeEventHead(data)
	require.NoError(t, err)
	bustest.SameFields(t, *head, full)
}

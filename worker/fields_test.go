package worker

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// fullEvent is an event with every field the slim decodings read set.
func fullEvent() wire.Event {
	return wire.Event{
		V: wire.EventVersion, ID: "p1:7", Type: "tool.approval_rejected", Event: machine.EventReject,
		From: machine.StatePendingApproval, To: machine.StateRejectedByUser, Actor: "alice", Reason: "no",
		At: 1_700_000_000_123, Revision: 7,
		Receipt: &machine.Receipt{Seq: 2, PendingID: "p1", Event: machine.EventReject, Actor: "alice"},
		Entry: &machine.Entry{
			PendingID: "p1", ToolCallID: "c1", ToolName: "deploy", ToolArguments: json.RawMessage(`{"a":1}`),
			CallerBotID: "agent", ConversationID: "conv", RequestedAt: 1_700_000_000_000, Status: machine.StateRejectedByUser,
			Result: json.RawMessage(`{"r":2}`), Cost: 1.5, Team: "ops", EstimatedCost: 2.5, Description: "deploys",
			CostReserved: 2.5, CostDay: "2023-11-14",
		},
	}
}

// The fan-out decodes an event into fanOutEvent, the settler into
// settleEvent: each of their fields, at any depth, is a field of
// wire.Event (or of its entry) of the same name and JSON key, and decodes
// the same value from the wire.Event's JSON.
func TestSlimEvents_DecodeAsTheWireEvent(t *testing.T) {
	full := fullEvent()
	data, err := json.Marshal(full)
	require.NoError(t, err)
	t.Run("fanOutEvent", func(t *testing.T) {
		var slim fanOutEvent
		require.NoError(t, wire.Unmarshal(data, &slim))
		bustest.SameFields(t, slim, full)
		assert.Equal(t, notifies(&full), notifiesOf(slim.Event, slim.From, slim.To))
	})
	t.Run("settleEvent", func(t *testing.T) {
		var slim settleEvent
		require.NoError(t, wire.Unmarshal(data, &slim))
		bustest.SameFields(t, slim, full)
	})
}

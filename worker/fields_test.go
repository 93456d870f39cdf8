package worker

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		require.NoError(t, json.Unmarshal(data, &slim))
		requireSameFields(t, "event", reflect.ValueOf(slim), reflect.ValueOf(full))
		assert.Equal(t, notifies(&full), notifiesOf(slim.Event, slim.From, slim.To))
	})
	t.Run("settleEvent", func(t *testing.T) {
		var slim settleEvent
		require.NoError(t, json.Unmarshal(data, &slim))
		requireSameFields(t, "event", reflect.ValueOf(slim), reflect.ValueOf(full))
	})
}

// requireSameFields checks that every field of slim, at any depth, is
// set (the fixture covers it) and equals the field of the same name in
// full, and that both have the same JSON key.
func requireSameFields(t *testing.T, path string, slim, full reflect.Value) {
	t.Helper()
	for slim.Kind() == reflect.Pointer {
		require.False(t, slim.IsNil(), "%s: decoded as nil", path)
		require.False(t, full.IsNil(), "%s: nil in the wire's", path)
		slim, full = slim.Elem(), full.Elem()
	}
	if slim.Kind() != reflect.Struct {
		assert.False(t, slim.IsZero(), "%s: the fixture sets it", path)
		assert.Equal(t, full.Interface(), slim.Interface(), path)
		return
	}
	for i := range slim.NumField() {
		f := slim.Type().Field(i)
		ff, ok := full.Type().FieldByName(f.Name)
		require.True(t, ok, "%s.%s: no such field in %s", path, f.Name, full.Type())
		assert.Equal(t, strings.TrimSuffix(ff.Tag.Get("json"), ",omitempty"), f.Tag.Get("json"), "%s.%s: JSON key", path, f.Name)
		requireSameFields(t, path+"."+f.Name, slim.Field(i), full.FieldByIndex(ff.Index))
	}
}

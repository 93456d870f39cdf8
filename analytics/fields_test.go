package analytics

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The subscriber decodes an event into eventFields, not wire.Event: each
// of its fields, at any depth, is a field of wire.Event (or of the entry,
// or of a vote) of the same name, and decodes the same value from the
// wire.Event's JSON. The aggregates read nothing else, since they take
// an eventFields.
func TestEventFields_DecodeAsTheWireEvent(t *testing.T) {
	full := wire.Event{
		V: wire.EventVersion, ID: "p1:7", Type: "tool.approval_granted", Event: machine.EventVote,
		From: machine.StatePendingApproval, To: machine.StatePendingApproval, Actor: "alice", Reason: "fine",
		At: 1_700_000_000_123, Revision: 7,
		Receipt: &machine.Receipt{Seq: 2, PendingID: "p1", Event: machine.EventVote, Actor: "alice"},
		Entry: &machine.Entry{
			PendingID: "p1", ToolCallID: "c1", ToolName: "deploy", ToolArguments: json.RawMessage(`{"a":1}`),
			CallerBotID: "agent", ConversationID: "conv", RequestedAt: 1_700_000_000_000, Status: machine.StatePendingApproval,
			ApprovalTimeoutAt: 1_700_000_300_000, ApprovedOrRejectedByUserID: "bob", DecisionTime: 1_700_000_000_100,
			Votes:  []machine.Vote{{By: "carol", Approve: false, At: 1_700_000_000_050, Reason: "no"}, {By: "alice", Approve: true, At: 1_700_000_000_120}},
			Result: json.RawMessage(`{"r":2}`), Cost: 1.5, Team: "ops", EstimatedCost: 2.5, Description: "deploys",
		},
	}
	data, err := json.Marshal(full)
	require.NoError(t, err)
	var slim eventFields
	require.NoError(t, json.Unmarshal(data, &slim))
	requireSameFields(t, "event", reflect.ValueOf(slim), reflect.ValueOf(full))
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
	switch slim.Kind() {
	case reflect.Struct:
		for i := range slim.NumField() {
			f := slim.Type().Field(i)
			ff, ok := full.Type().FieldByName(f.Name)
			require.True(t, ok, "%s.%s: no such field in %s", path, f.Name, full.Type())
			assert.Equal(t, ff.Tag.Get("json"), f.Tag.Get("json")+omitEmptyOf(ff.Tag.Get("json")), "%s.%s: JSON key", path, f.Name)
			requireSameFields(t, path+"."+f.Name, slim.Field(i), full.FieldByIndex(ff.Index))
		}
	case reflect.Slice:
		require.Positive(t, slim.Len(), "%s: the fixture sets it", path)
		require.Equal(t, full.Len(), slim.Len(), path)
		for i := range slim.Len() {
			requireSameFields(t, path, slim.Index(i), full.Index(i))
		}
	default:
		if slim.Kind() != reflect.Bool {
			assert.False(t, slim.IsZero(), "%s: the fixture sets it", path)
		}
		assert.Equal(t, full.Interface(), slim.Interface(), path)
	}
}

func omitEmptyOf(tag string) string {
	if len(tag) > 10 && tag[len(tag)-10:] == ",omitempty" {
		return ",omitempty"
	}
	return ""
}

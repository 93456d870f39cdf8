package gate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestMask_WhoSeesACallsSecrets: the agent that asked and executors read
// a call's arguments as they are; people (admins, approvers, viewers) read
// them masked and marked so, in a read, a list, a decision's answer and a
// refusal's entry; an approver's edit that leaves a secret as shown keeps its value,
// and one that puts the placeholder into a changed value is refused.
func TestMask_WhoSeesACallsSecrets(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	args := `{"password":"hunter2","host":"db"}`
	masked := `{"password":"[redacted]","host":"db"}`
	e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: "1", ToolName: "connect", Arguments: json.RawMessage(args), ConversationID: "m"})
	require.NoError(t, err)

	for name, want := range map[string]string{"agent": args, "executor": args, "admin": masked, "approver": masked, "viewer": masked} {
		a := gate.Actor{Name: name, Roles: []wire.Role{wire.Role(name)}}
		if name == "agent" {
			a = bot
		}
		got, err := g.Get(ctx, a, wire.GetRequest{PendingID: e.PendingID})
		require.NoError(t, err, name)
		assert.JSONEq(t, want, string(got.ToolArguments), name)
		assert.Equal(t, want == masked, got.SecretsMasked, name)
		page, err := g.List(ctx, a, wire.ListRequest{ConversationID: "m"})
		require.NoError(t, err, name)
		require.Len(t, page.Items, 1, name)
		assert.JSONEq(t, want, string(page.Items[0].ToolArguments), name)
		assert.Equal(t, want == masked, page.Items[0].SecretsMasked, name)
	}

	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleApprover}}
	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Approved: true, Arguments: json.RawMessage(`{"password":"[redacted] or not","host":"db2"}`)})
	require.ErrorIs(t, err, machine.ErrInvalid, "a placeholder inside a changed value")
	got, err := g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Approved: true, Arguments: json.RawMessage(`{"password":"[redacted]","host":"db2"}`)})
	require.NoError(t, err)
	assert.JSONEq(t, `{"password":"[redacted]","host":"db2"}`, string(got.ToolArguments), "the answer, masked")
	stored, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.JSONEq(t, `{"password":"hunter2","host":"db2"}`, string(stored.ToolArguments), "the secret the approver left as shown is kept")

	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Approved: false})
	var te *machine.TransitionError
	require.ErrorAs(t, err, &te)
	assert.JSONEq(t, `{"password":"[redacted]","host":"db2"}`, string(te.Entry.ToolArguments), "a refusal's entry, masked")
}

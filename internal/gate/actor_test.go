package gate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

func actor(name string, roles ...wire.Role) gate.Actor { return gate.Actor{Name: name, Roles: roles} }

// TestActor_EachRoleDoesOnlyWhatItMay: the rules of who may do what hold
// in the application layer, so every transport applies the same ones;
// what is refused changes nothing.
func TestActor_EachRoleDoesOnlyWhatItMay(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	bot, other := actor("bot", wire.RoleAgent), actor("other", wire.RoleAgent)
	alice, viewer, exec := actor("alice", wire.RoleApprover), actor("vera", wire.RoleViewer), actor("exec", wire.RoleExecutor)
	call := func(id string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "deploy", ConversationID: "c"}
	}

	_, err := g.Submit(ctx, bot, machine.Call{ToolCallID: "x", ToolName: "deploy", ConversationID: "c", CallerBotID: "other"})
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent submits as itself")
	_, err = g.Submit(ctx, viewer, call("v"))
	require.ErrorIs(t, err, machine.ErrForbidden, "a viewer submits nothing")
	e, err := g.Submit(ctx, bot, call("t1"))
	require.NoError(t, err)
	assert.Equal(t, "bot", e.CallerBotID, "the caller is the credential's name")
	_, err = g.Submit(ctx, other, call("t2"))
	require.NoError(t, err)

	// Another agent neither sees nor cancels bot's call.
	_, err = g.Get(ctx, other, wire.GetRequest{PendingID: e.PendingID})
	require.ErrorIs(t, err, machine.ErrNotFound)
	_, err = g.History(ctx, other, wire.GetRequest{PendingID: e.PendingID})
	require.ErrorIs(t, err, machine.ErrNotFound)
	_, err = g.Cancel(ctx, other, wire.CancelRequest{PendingID: e.PendingID, Reason: "mine now"})
	require.ErrorIs(t, err, machine.ErrNotFound)
	_, err = g.ClaimAt(ctx, other, wire.ReportRequest{PendingID: e.PendingID, LeaseMs: time.Minute.Milliseconds()})
	require.ErrorIs(t, err, machine.ErrNotFound)
	page, err := g.List(ctx, other, wire.ListRequest{})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	assert.Equal(t, "other", page.Items[0].CallerBotID, "an agent lists its own calls only")
	_, err = g.List(ctx, other, wire.ListRequest{CallerBotID: "bot"})
	require.ErrorIs(t, err, machine.ErrForbidden)
	reply, err := g.CancelConversation(ctx, other, wire.CancelRequest{ConversationID: "c", Reason: "stop"})
	require.NoError(t, err)
	require.Len(t, reply.Cancelled, 1, "an agent cancels its own calls of a conversation, not the others'")
	assert.Equal(t, "other", reply.Cancelled[0].CallerBotID)

	// Only an approver decides, and only as itself.
	_, err = g.Decide(ctx, viewer, wire.DecideRequest{PendingID: e.PendingID, Approved: true})
	require.ErrorIs(t, err, machine.ErrForbidden, "a viewer may not decide")
	_, err = g.Decide(ctx, bot, wire.DecideRequest{PendingID: e.PendingID, Approved: true})
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent may not decide")
	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "bob"})
	require.ErrorIs(t, err, machine.ErrForbidden, "alice may not decide as bob")
	status, _ := wire.ErrorStatus(err)
	assert.Equal(t, 403, status)
	page, err = g.List(ctx, viewer, wire.ListRequest{})
	require.NoError(t, err)
	assert.Len(t, page.Items, 2, "a viewer reads every call")
	got, err := g.Get(ctx, viewer, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "the refused decisions changed nothing")

	got, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Approved: true})
	require.NoError(t, err)
	assert.Equal(t, "alice", got.ApprovedOrRejectedByUserID)

	// An executor's holder is kept under its credential's name.
	_, err = g.ClaimAt(ctx, viewer, wire.ReportRequest{PendingID: e.PendingID, LeaseMs: time.Minute.Milliseconds()})
	require.ErrorIs(t, err, machine.ErrForbidden)
	got, err = g.ClaimAt(ctx, exec, wire.ReportRequest{PendingID: e.PendingID, By: "worker-2", LeaseMs: time.Minute.Milliseconds()})
	require.NoError(t, err)
	assert.Equal(t, "exec/worker-2", got.Lease.Holder)
	_, err = g.Complete(ctx, actor("exec2", wire.RoleExecutor), wire.ReportRequest{PendingID: e.PendingID, By: "exec/worker-2"})
	require.ErrorIs(t, err, machine.ErrConflict, "another credential cannot report on exec's lease")
	got, err = g.Complete(ctx, exec, wire.ReportRequest{PendingID: e.PendingID, By: "worker-2"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)

	// The policy: viewers read it, only admins set it.
	_, err = g.Policy(ctx, bot, wire.PolicyGetRequest{})
	require.ErrorIs(t, err, machine.ErrForbidden)
	doc, err := g.Policy(ctx, viewer, wire.PolicyGetRequest{})
	require.NoError(t, err)
	_, err = g.Policy(ctx, viewer, wire.PolicyGetRequest{ShowSecrets: true})
	require.ErrorIs(t, err, machine.ErrForbidden, "only an admin sees the policy's secrets")
	_, err = g.SetPolicy(ctx, alice, doc)
	require.ErrorIs(t, err, machine.ErrForbidden)
	_, err = g.SetPolicy(ctx, actor("root", wire.RoleAdmin), doc)
	require.NoError(t, err)

	_, err = g.Get(ctx, gate.Actor{}, wire.GetRequest{PendingID: e.PendingID})
	require.ErrorIs(t, err, machine.ErrForbidden, "no identity, no access")
}

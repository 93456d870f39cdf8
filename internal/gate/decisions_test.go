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

// TestDecide_RespondAndInterrupt: only an approver answers a call with a
// result, as themselves, and the event of a rejection that interrupts
// says so; an approval after the deadline of a call the timer approves
// is refused, and the timer's approval made on the spot.
func TestDecide_RespondAndInterrupt(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	onTimeout := machine.TimeoutOutcome("")
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Respondable: true, OnTimeout: onTimeout, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	submit := func(id string) *machine.Entry {
		t.Helper()
		e, err := g.Submit(ctx, gate.System, machine.Call{ToolCallID: id, ToolName: "web_search", CallerBotID: "bot", ConversationID: "answers"})
		require.NoError(t, err)
		return e
	}
	bot, alice := actor("bot", wire.RoleAgent), actor("alice", wire.RoleApprover)

	e := submit("t1")
	_, err := g.Decide(ctx, bot, wire.DecideRequest{PendingID: e.PendingID, Result: json.RawMessage(`"made up"`)})
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent answers no call, its own least")
	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, By: "bob", Result: json.RawMessage(`1`)})
	require.ErrorIs(t, err, machine.ErrForbidden, "nor as someone else")
	got, err := g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Result: json.RawMessage(`{"hits":3}`)})
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.Equal(t, "alice", got.RespondedBy)
	evs := wire.EventsOf(got, 2)
	require.Len(t, evs, 1)
	assert.Equal(t, wire.SubjectApprovalResponded, evs[0].Type)
	assert.Equal(t, machine.DecidedByHuman, evs[0].DecidedBy)

	e = submit("t2")
	got, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Reason: "stop", Interrupt: true})
	require.NoError(t, err)
	evs = wire.EventsOf(got, 2)
	require.Len(t, evs, 1)
	assert.Equal(t, wire.SubjectApprovalRejected, evs[0].Type)
	assert.True(t, evs[0].Interrupt, "the event says the rejection interrupts")

	onTimeout = machine.TimeoutApprove
	e = submit("t3")
	later := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask, Clock: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	_, err = later.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Reason: "too late"})
	require.ErrorIs(t, err, machine.ErrExpired)
	got, err = g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByTimeout, got.Status, "no EditChecker can confirm an approval: the timer rejects")
	assert.Contains(t, got.StatusReason, "no policy can confirm it")
}

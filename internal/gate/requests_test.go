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

// TestRequests_RefuseAMissingID: every use case that acts on one call
// (or one conversation) refuses a request that names none, as invalid and
// naming the field, whatever transport carried it; the refusal changes
// nothing stored.
func TestRequests_RefuseAMissingID(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	e, err := g.Submit(ctx, actor("bot", wire.RoleAgent), machine.Call{ToolCallID: "t1", ToolName: "deploy", ConversationID: "c"})
	require.NoError(t, err)
	_, before, err := g.Read(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)

	a := gate.System
	report := wire.ReportRequest{By: "exec", LeaseMs: 1000, Attempt: 1}
	for name, call := range map[string]func() error{
		"get":     func() error { _, err := g.Get(ctx, a, wire.GetRequest{}); return err },
		"read":    func() error { _, _, err := g.Read(ctx, a, wire.GetRequest{}); return err },
		"history": func() error { _, err := g.History(ctx, a, wire.GetRequest{}); return err },
		"decide":  func() error { _, err := g.Decide(ctx, a, wire.DecideRequest{Approved: true, By: "alice"}); return err },
		"cancel": func() error {
			_, err := g.Cancel(ctx, a, wire.CancelRequest{ConversationID: "c", Reason: "stop"})
			return err
		},
		"started":   func() error { _, err := g.ClaimAt(ctx, a, report); return err },
		"heartbeat": func() error { _, err := g.Heartbeat(ctx, a, report); return err },
		"retry":     func() error { _, err := g.Retry(ctx, a, report); return err },
		"succeeded": func() error { _, err := g.Complete(ctx, a, report); return err },
		"failed":    func() error { _, err := g.Fail(ctx, a, report); return err },
	} {
		err := call()
		require.ErrorIs(t, err, machine.ErrInvalid, name)
		assert.ErrorContains(t, err, "pendingId: required", name)
	}
	_, err = g.CancelConversation(ctx, a, wire.CancelRequest{PendingID: e.PendingID, Reason: "stop"})
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.ErrorContains(t, err, "conversationId: required")

	got, after, err := g.Read(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused request writes nothing")
	assert.Equal(t, machine.StatePendingApproval, got.Status)
}

// TestRequests_LeaseDefaultsToAnHour: a claim or heartbeat that names no
// lease gets an hour; one that names it, that long.
func TestRequests_LeaseDefaultsToAnHour(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	now := time.UnixMilli(1_800_000_000_000)
	run := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionRun, Reason: "run"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: run, Clock: func() time.Time { return now }})
	e, err := g.Submit(ctx, actor("bot", wire.RoleAgent), machine.Call{ToolCallID: "t1", ToolName: "deploy", ConversationID: "c"})
	require.NoError(t, err)
	exec := actor("exec", wire.RoleExecutor)

	got, err := g.ClaimAt(ctx, exec, wire.ReportRequest{PendingID: e.PendingID, By: "w1"})
	require.NoError(t, err)
	require.NotNil(t, got.Lease)
	assert.Equal(t, now.Add(time.Hour).UnixMilli(), got.Lease.ExpiresAt, "a claim naming no lease: an hour")

	got, err = g.Heartbeat(ctx, exec, wire.ReportRequest{PendingID: e.PendingID, By: "w1", LeaseMs: 5000})
	require.NoError(t, err)
	assert.Equal(t, now.Add(5*time.Second).UnixMilli(), got.Lease.ExpiresAt, "a heartbeat naming 5s")
}

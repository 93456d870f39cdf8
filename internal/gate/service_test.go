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

// TestDecide_AfterTheDeadlineExpiresTheCall: an approval that comes after
// the deadline of a call its policy rejects then is refused with 409
// expired, and the call is rejected by timeout there and then, whether or
// not a timer is running.
func TestDecide_AfterTheDeadlineExpiresTheCall(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true, Reason: "ask"}, nil
	})
	now := gate.New(gate.Config{NC: env.NC, Buckets: env.Buckets, Policy: ask})
	e, err := now.Submit(ctx, gate.System, machine.Call{ToolCallID: "t1", ToolName: "deploy", CallerBotID: "bot", ConversationID: "late"})
	require.NoError(t, err)

	later := gate.New(gate.Config{NC: env.NC, Buckets: env.Buckets, Policy: ask, Clock: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	_, err = later.Decide(ctx, gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.ErrorIs(t, err, machine.ErrExpired)
	status, code := wire.ErrorStatus(err)
	assert.Equal(t, 409, status)
	assert.Equal(t, "expired", code)

	got, err := now.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByTimeout, got.Status, "expired on the spot, with no timer running")
	assert.Empty(t, got.ApprovedOrRejectedByUserID, "the late approver decided nothing")
}

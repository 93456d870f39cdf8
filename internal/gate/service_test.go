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
	now := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	e, err := now.Submit(ctx, gate.System, machine.Call{ToolCallID: "t1", ToolName: "deploy", CallerBotID: "bot", ConversationID: "late"})
	require.NoError(t, err)

	later := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask, Clock: func() time.Time { return time.Now().Add(2 * time.Hour) }})
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

// TestDecide_SentAgainIsAnsweredWithWhatItWrote: a decision sent again
// with its request id (its first answer lost) is answered with the entry
// it wrote, a vote under a quorum too; the same id from another
// approver, or the same approver's new decision, is still refused.
func TestDecide_SentAgainIsAnsweredWithWhatItWrote(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	quorum := false
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		v := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}
		if quorum {
			v.Quorum = &machine.Quorum{Required: 2}
		}
		return v, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	e, err := g.Submit(ctx, gate.System, machine.Call{ToolCallID: "t1", ToolName: "deploy", CallerBotID: "bot", ConversationID: "again"})
	require.NoError(t, err)

	reject := wire.DecideRequest{PendingID: e.PendingID, By: "alice", Reason: "no", RequestID: "req-1"}
	first, err := g.Decide(ctx, gate.System, reject)
	require.NoError(t, err)
	again, err := g.Decide(ctx, gate.System, reject)
	require.NoError(t, err, "the same decision sent again")
	assert.Equal(t, first.LastTransition, again.LastTransition)
	assert.Equal(t, machine.StateRejectedByUser, again.Status)

	reject.By = "bob"
	_, err = g.Decide(ctx, gate.System, reject)
	assert.ErrorIs(t, err, machine.ErrConflict, "another approver's decision under the same id")
	_, err = g.Decide(ctx, gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice", RequestID: "req-2"})
	assert.ErrorIs(t, err, machine.ErrConflict, "a new decision of a decided call")
	_, err = g.Decide(ctx, gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice", RequestID: "no spaces"})
	assert.ErrorIs(t, err, machine.ErrInvalid)

	// A session approval sent again records its grant once.
	s, err := g.Submit(ctx, gate.System, machine.Call{ToolCallID: "t3", ToolName: "deploy", CallerBotID: "bot", ConversationID: "again"})
	require.NoError(t, err)
	session := wire.DecideRequest{PendingID: s.PendingID, Approved: true, By: "alice", Scope: machine.ScopeSession, RequestID: "session-1"}
	for range 2 {
		_, err = g.Decide(ctx, gate.System, session)
		require.NoError(t, err)
	}
	grants, err := g.Grants(ctx, gate.System, wire.GrantsRequest{ConversationID: "again"})
	require.NoError(t, err)
	assert.Len(t, grants, 1, "one grant for one approval: %+v", grants)

	quorum = true
	q, err := g.Submit(ctx, gate.System, machine.Call{ToolCallID: "t2", ToolName: "deploy", CallerBotID: "bot", ConversationID: "again"})
	require.NoError(t, err)
	vote := wire.DecideRequest{PendingID: q.PendingID, Approved: true, By: "alice", RequestID: "vote-1"}
	_, err = g.Decide(ctx, gate.System, vote)
	require.NoError(t, err)
	voted, err := g.Decide(ctx, gate.System, vote)
	require.NoError(t, err, "the same vote sent again")
	assert.Equal(t, 1, voted.Approvals(), "counted once")
}

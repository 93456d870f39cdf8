package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// waitPolicy asks a human about Bash, denies rm -rf, and in conversation
// "expires" rejects a call nobody decided within 300ms.
const waitPolicy = `
default:
  requiresApprovalTools: [Bash]
  rules:
    deny: ["Bash(rm -rf *)"]
conversations:
  expires:
    approvalTimeoutMs: 300
    autoRejectOnTimeout: true
`

// submitAndWaitAsync runs SubmitAndWait in the background; the returned
// channel of pending receives the call once it waits for a human.
func submitAndWaitAsync(ctx context.Context, c *client.Client, call machine.Call, opts client.WaitOptions) (verdict <-chan client.Verdict, pending <-chan *machine.Entry) {
	v, p := make(chan client.Verdict, 1), make(chan *machine.Entry, 1)
	opts.OnPending = func(e *machine.Entry) { p <- e }
	go func() { v <- c.SubmitAndWait(ctx, call, opts) }()
	return v, p
}

func receiveVerdict(t *testing.T, ch <-chan client.Verdict) client.Verdict {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("SubmitAndWait did not return")
		return client.Verdict{}
	}
}

func receivePending(t *testing.T, ch <-chan *machine.Entry) *machine.Entry {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("the call never waited for a human")
		return nil
	}
}

// long is a wait nothing in these tests reaches, within a timeout that
// leaves room for it.
var long = client.WaitOptions{Wait: 20 * time.Second, Timeout: 30 * time.Second}

func TestSubmitAndWait_Decisions(t *testing.T) {
	t.Parallel()
	g := startGate(t, waitPolicy)

	t.Run("approved: run the approver's arguments", func(t *testing.T) {
		t.Parallel()
		verdict, pending := submitAndWaitAsync(t.Context(), g.c, bash("approve", "t1", "rm -r build"), long)
		e := receivePending(t, pending)
		_, err := g.c.Decide(t.Context(), wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice",
			Arguments: json.RawMessage(`{"command":"rm -r build/out"}`)})
		require.NoError(t, err)
		v := receiveVerdict(t, verdict)
		assert.Equal(t, client.VerdictRun, v.Kind, "%+v", v)
		assert.Equal(t, "approve.t1", v.PendingID)
		assert.Equal(t, client.Approved, v.Outcome.Kind)
		assert.JSONEq(t, `{"command":"rm -r build/out"}`, string(v.Outcome.Arguments))
		assert.NoError(t, v.Err)
	})
	t.Run("rejected: who and why", func(t *testing.T) {
		t.Parallel()
		verdict, pending := submitAndWaitAsync(t.Context(), g.c, bash("reject", "t1", "git push"), long)
		e := receivePending(t, pending)
		_, err := g.c.Decide(t.Context(), wire.DecideRequest{PendingID: e.PendingID, By: "alice", Reason: "not on main"})
		require.NoError(t, err)
		v := receiveVerdict(t, verdict)
		assert.Equal(t, client.VerdictRefused, v.Kind, "%+v", v)
		var rej *client.RejectedError
		require.ErrorAs(t, v.Err, &rej)
		assert.Equal(t, client.RejectedByUser, rej.Kind)
		assert.Equal(t, "alice", rej.By)
		assert.Equal(t, "not on main", rej.Reason)
	})
	t.Run("denied by policy: the rule", func(t *testing.T) {
		t.Parallel()
		verdict, pending := submitAndWaitAsync(t.Context(), g.c, bash("deny", "t1", "rm -rf /"), long)
		v := receiveVerdict(t, verdict)
		assert.Equal(t, client.VerdictRefused, v.Kind, "%+v", v)
		var rej *client.RejectedError
		require.ErrorAs(t, v.Err, &rej)
		assert.Equal(t, client.DeniedByPolicy, rej.Kind)
		assert.Equal(t, `rules.deny "Bash(rm -rf *)" (default)`, rej.Rule)
		assert.Empty(t, pending, "a denied call never waits for a human")
	})
}

// Nobody decides within the wait: the call is withdrawn, saying why.
func TestSubmitAndWait_WaitEndsWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	g := startGate(t, waitPolicy)
	start := time.Now()
	// The timeout leaves the withdrawal seconds, not the moment a quiet
	// machine needs: the wait's end, not the machine's speed, is tested.
	v := g.c.SubmitAndWait(t.Context(), bash("wait", "t1", "git push"), client.WaitOptions{
		Asked: start, Wait: 300 * time.Millisecond, Timeout: 5 * time.Second, WithdrawNote: ": asked elsewhere",
	})
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "waited to the end of the wait")
	assert.Equal(t, client.VerdictTimedOut, v.Kind, "%+v", v)
	assert.Equal(t, "wait.t1", v.PendingID)
	assert.Equal(t, "no decision within 300ms", v.Why)
	assert.NoError(t, v.Err, "withdrawn")
	e, err := g.c.Get(t.Context(), "wait.t1")
	require.NoError(t, err)
	assert.Equal(t, machine.StateCancelled, e.Status)
	assert.Equal(t, "withdrawn: no decision within 300ms: asked elsewhere", e.StatusReason)
}

// An approval deadline within the wait, under a policy that rejects
// unanswered calls, decides: the call is refused as expired at it,
// without waiting for toolgate's timer (none runs here).
func TestSubmitAndWait_ApprovalDeadlineWithinTheWaitExpires(t *testing.T) {
	t.Parallel()
	g := startGate(t, waitPolicy)
	start := time.Now()
	v := g.c.SubmitAndWait(t.Context(), bash("expires", "t1", "git push"), client.WaitOptions{Wait: 2 * time.Second, Timeout: 5 * time.Second})
	assert.Less(t, time.Since(start), 2*time.Second, "answered at the deadline, before the end of the wait")
	assert.Equal(t, client.VerdictExpired, v.Kind, "%+v", v)
	assert.Equal(t, "expires.t1", v.PendingID)
	assert.Equal(t, 300*time.Millisecond, v.ApprovalTimeout)
	require.NotNil(t, v.Entry)
	assert.Equal(t, "Bash", v.Entry.ToolName)
	e, err := g.c.Get(t.Context(), "expires.t1")
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status, "not withdrawn: no timer has written it, and toolgate takes no decision after the deadline")
}

// The caller stops waiting: the call is withdrawn, with the reason.
func TestSubmitAndWait_CancelWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	g := startGate(t, waitPolicy)
	ctx, stop := context.WithCancelCause(t.Context())
	opts := long
	opts.Stopped = func(ctx context.Context) string { return "the agent stopped (" + context.Cause(ctx).Error() + ")" }
	verdict, pending := submitAndWaitAsync(ctx, g.c, bash("stop", "t1", "git push"), opts)
	receivePending(t, pending)
	stop(errors.New("killed"))
	v := receiveVerdict(t, verdict)
	assert.Equal(t, client.VerdictWithdrawn, v.Kind, "%+v", v)
	assert.Equal(t, "the agent stopped (killed)", v.Why)
	assert.NoError(t, v.Err)
	e, err := g.c.Get(t.Context(), "stop.t1")
	require.NoError(t, err)
	assert.Equal(t, machine.StateCancelled, e.Status)
	assert.Equal(t, "withdrawn: the agent stopped (killed)", e.StatusReason)
}

// A decision that lands before the withdraw stands: it is the verdict.
func TestWithdraw_DecisionThatCameFirstStands(t *testing.T) {
	t.Parallel()
	g := startGate(t, waitPolicy)
	e, err := g.c.Submit(t.Context(), bash("first", "t1", "git push"))
	require.NoError(t, err)
	_, err = g.c.Decide(t.Context(), wire.DecideRequest{PendingID: e.PendingID, By: "alice", Reason: "no"})
	require.NoError(t, err)
	v := g.c.Withdraw(t.Context(), e.PendingID, "the agent stopped", long)
	assert.Equal(t, client.VerdictRefused, v.Kind, "%+v", v)
	var rej *client.RejectedError
	require.ErrorAs(t, v.Err, &rej)
	assert.Equal(t, "alice", rej.By)
}

// Without toolgate, nothing is submitted: unreachable, saying so.
func TestSubmitAndWait_UnreachableSaysSo(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithUnavailableWait(0))
	require.NoError(t, err)
	v := c.SubmitAndWait(t.Context(), bash("down", "t1", "ls"), long)
	assert.Equal(t, client.VerdictUnreachable, v.Kind, "%+v", v)
	assert.Empty(t, v.PendingID, "no call was recorded")
	assert.ErrorIs(t, v.Err, client.ErrUnavailable)
}

// A wait that leaves no time to withdraw the call is refused before
// anything is submitted.
func TestSubmitAndWait_WaitPastTheTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	g := startGate(t, waitPolicy)
	v := g.c.SubmitAndWait(t.Context(), bash("bad", "t1", "ls"), client.WaitOptions{Wait: time.Minute, Timeout: time.Minute})
	assert.Equal(t, client.VerdictUnreachable, v.Kind, "%+v", v)
	assert.ErrorIs(t, v.Err, machine.ErrInvalid)
	_, err := g.c.Get(t.Context(), "bad.t1")
	assert.ErrorIs(t, err, machine.ErrNotFound, "nothing submitted")
}

package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestClock_ProcessesWhoseClocksDisagreeAgreeOnDeadlinesAndLeases: an
// intake on a machine whose clock runs 30 s slow and a timer and a second
// intake on one 30 s fast tell the time by the NATS server's clock: the
// timer does not expire an approval before its timeout has passed, and
// the fast intake does not hand a live lease to another executor.
// (By their own clocks, the deadline would be a minute past at submit,
// and the lease a minute gone at its claim.)
func TestClock_ProcessesWhoseClocksDisagreeAgreeOnDeadlinesAndLeases(t *testing.T) {
	t.Parallel()
	slow := func() time.Time { return time.Now().Add(-30 * time.Second) }
	fast := func() time.Time { return time.Now().Add(30 * time.Second) }
	const timeout = 2 * time.Second
	opts := toolgatetest.Options{Roles: []string{"relay", "intake"}, LocalClock: slow,
		Policy: fmt.Sprintf("default: {requiresApprovalTools: [deploy], approvalTimeoutMs: %d}\n", timeout.Milliseconds())}
	g := toolgatetest.Start(t, opts)
	sibling := g.Sibling("intake", "timer")
	sibling.LocalClock = fast
	h := toolgatetest.Start(t, sibling)

	t.Run("an approval expires no earlier than its timeout", func(t *testing.T) {
		submitted := time.Now()
		e, err := g.Service.Submit(t.Context(), gate.System, machine.Call{ToolCallID: "t1", ToolName: "deploy", CallerBotID: "agent", ConversationID: "skew"})
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, e.Status)
		var expired time.Time
		bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the timer expires the call", func() (bool, any) {
			got, err := h.Service.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
			if err != nil {
				return false, err
			}
			expired = time.Now()
			return got.Status == machine.StateRejectedByTimeout, got.Status
		})
		// The clocks are told within their round trips to the server, on
		// this machine well under 100 ms.
		assert.GreaterOrEqual(t, expired.Sub(submitted), timeout-100*time.Millisecond, "expired after its timeout, not a minute early")
	})

	t.Run("a live lease is not handed to another executor", func(t *testing.T) {
		e, err := g.Service.Submit(t.Context(), gate.System, machine.Call{ToolCallID: "t2", ToolName: "deploy", CallerBotID: "agent", ConversationID: "skew"})
		require.NoError(t, err)
		_, err = g.Service.Decide(t.Context(), gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
		require.NoError(t, err)
		executor := func(name string) gate.Actor { return gate.Actor{Name: name, Roles: []wire.Role{wire.RoleExecutor}} }
		claimed, err := g.Service.ClaimAt(t.Context(), executor("exec-1"), wire.ReportRequest{PendingID: e.PendingID, By: "exec-1", LeaseMs: 20_000})
		require.NoError(t, err)
		require.Equal(t, "exec-1", claimed.Lease.Holder)
		_, err = h.Service.ClaimAt(t.Context(), executor("exec-2"), wire.ReportRequest{PendingID: e.PendingID, By: "exec-2", LeaseMs: 20_000})
		require.ErrorIs(t, err, machine.ErrConflict, "exec-1's lease has 20 s to run")
		assert.ErrorContains(t, err, "by exec-1")
	})
}

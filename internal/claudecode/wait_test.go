package claudecode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

func TestWaitFor_LeavesTimeToAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		wait, timeout time.Duration
		want          time.Duration
		err           string
	}{
		{0, 0, 590 * time.Second, ""}, // Claude Code's default for a command hook
		{0, 600 * time.Second, 590 * time.Second, ""},
		{5 * time.Minute, 600 * time.Second, 5 * time.Minute, ""},
		{590 * time.Second, 600 * time.Second, 590 * time.Second, ""},
		{0, 30 * time.Second, 20 * time.Second, ""}, // an HTTP hook's default
		{0, 10 * time.Second, 5 * time.Second, ""},  // under 20s: half of it
		{591 * time.Second, 600 * time.Second, 0, "at most 9m50s"},
		{10 * time.Minute, 10 * time.Minute, 0, "leaves no time to answer within the hook's timeout 10m0s"},
		{-time.Second, 0, 0, "wait: must be >= 0"},
		{0, -time.Second, 0, "timeout: must be > 0"},
	} {
		t.Run(fmt.Sprintf("%s_in_%s", tc.wait, tc.timeout), func(t *testing.T) {
			got, err := claudecode.WaitFor(tc.wait, tc.timeout)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				assert.ErrorIs(t, err, machine.ErrInvalid)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseDuration_SecondsOrDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"600": 600 * time.Second, "0.5": 500 * time.Millisecond, "10m": 10 * time.Minute, "0": 0} {
		got, err := claudecode.ParseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := claudecode.ParseDuration("soon")
	assert.ErrorContains(t, err, `"soon": want seconds (600) or a duration (10m)`)
}

// With --wait equal to the approval timeout of a policy that rejects
// unanswered calls, the deadline decides, every time: deny, and no
// approval is taken after it.
func TestHooks_ApprovalDeadlineWithinTheWaitDenies(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "rejects-at-1s" // approvalTimeoutMs: 1000, autoRejectOnTimeout: true
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			id := fmt.Sprintf("toolu_deadline_%d", i)
			got := handle(t, c, hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, id), claudecode.Options{Wait: time.Second})
			var out claudecode.PreToolUseOutput
			require.NoError(t, json.Unmarshal(got, &out))
			assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision, string(got))
			// Toolgate's timer or the hook may say so first; both say it timed out.
			assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "timed out")

			pending := machine.PendingID(session, id)
			_, err := c.Decide(t.Context(), wire.DecideRequest{PendingID: pending, Approved: true, By: "alice"})
			assert.ErrorIs(t, err, machine.ErrConflict, "an approval after the deadline is refused: the deny stands")
			bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the timer rejects "+pending, func() (bool, any) {
				e, err := c.Get(t.Context(), pending)
				return err == nil && e.Status == machine.StateRejectedByTimeout, e
			})
		})
	}
	// A wait shorter than the approval timeout ends first: the call is
	// withdrawn and Claude Code's prompt decides.
	got := handle(t, c, hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, "toolu_short"), claudecode.Options{Wait: 300 * time.Millisecond})
	var out claudecode.PreToolUseOutput
	require.NoError(t, json.Unmarshal(got, &out))
	assert.Equal(t, claudecode.Ask, out.HookSpecificOutput.PermissionDecision, string(got))
	e, err := c.Get(t.Context(), machine.PendingID(session, "toolu_short"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateCancelled, e.Status)
}

// The deny at the deadline does not wait for toolgate's timer: from the
// deadline on toolgate refuses any decision, so a call still pending then
// is answered as timed out even while no timer has written it.
func TestHooks_ApprovalDeadlineDeniesWithoutTheTimer(t *testing.T) {
	t.Parallel()
	c := startGateWith(t, "relay", "intake") // no timer
	const session = "rejects-at-1s"
	got := handle(t, c, hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, "toolu_no_timer"), claudecode.Options{Wait: 2 * time.Second})
	var out claudecode.PreToolUseOutput
	require.NoError(t, json.Unmarshal(got, &out))
	assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision, string(got))
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "timed out: nobody decided within its approval timeout (1s)")
	pending := machine.PendingID(session, "toolu_no_timer")
	e, err := c.Get(t.Context(), pending)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status, "no timer has written it")
	_, err = c.Decide(t.Context(), wire.DecideRequest{PendingID: pending, Approved: true, By: "alice"})
	assert.ErrorIs(t, err, machine.ErrConflict, "and yet no approval is taken")
	assert.ErrorContains(t, err, "approval deadline passed")
}

// A policy that keeps unanswered calls pending past their deadline does
// not make the hook wait for ever: it withdraws the call at its wait.
func TestHooks_OverdueCallIsWithdrawnAtTheWait(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "overdue-at-200ms" // approvalTimeoutMs: 200, autoRejectOnTimeout: false
	start := time.Now()
	got := handle(t, c, hookInput(session, claudecode.EventPermissionRequest, "Bash", `{"command":"git push"}`, ""), claudecode.Options{Wait: 800 * time.Millisecond})
	assert.GreaterOrEqual(t, time.Since(start), 800*time.Millisecond, "past the deadline, the call is still waited for, to the end of the wait")
	assert.JSONEq(t, `{}`, string(got), "Claude Code's dialog decides")
	all := calls(t, c, session, "Bash")
	require.Len(t, all, 1)
	assert.Equal(t, machine.StateCancelled, all[0].Status, describe(all))
	assert.Contains(t, all[0].StatusReason, "withdrawn: no decision within 800ms")
}

// When Claude Code stops waiting (the hook killed, the HTTP client gone),
// the call is withdrawn with the reason.
func TestHooks_StoppedWaitingWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	ctx, stop := context.WithCancelCause(t.Context())
	answer := handleAsync(ctx, c, hookInput("stopped", claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, "toolu_stop"), claudecode.Options{})
	newPending(t, c, "stopped", "Bash")
	stop(errors.New("hook killed at its timeout"))
	var out claudecode.PreToolUseOutput
	got := <-answer
	require.NoError(t, json.Unmarshal(got, &out), string(got))
	assert.Equal(t, claudecode.Ask, out.HookSpecificOutput.PermissionDecision)
	e, err := c.Get(t.Context(), machine.PendingID("stopped", "toolu_stop"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateCancelled, e.Status)
	assert.Contains(t, e.StatusReason, "Claude Code stopped waiting (hook killed at its timeout)")
}

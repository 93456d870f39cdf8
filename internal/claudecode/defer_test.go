package claudecode_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// A headless session's call that waits for a human is deferred at once
// and stays pending in toolgate; the resumed session (the same session
// and tool_use_id) defers again while nobody decided, then gets the
// decision: allow once approved, deny once rejected.
func TestHooks_HeadlessDefersAndTheResumedSessionGetsTheDecision(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	headless := claudecode.Options{Caller: "claude-code", Headless: true}
	for _, tc := range []struct {
		name     string
		decision wire.DecideRequest
		want     claudecode.Behavior
		context  string
	}{
		{"approved", wire.DecideRequest{Approved: true, By: "alice", Reason: "looks right"}, claudecode.Allow, "approved by alice once: looks right"},
		{"rejected", wire.DecideRequest{By: "bob", Reason: "not today"}, claudecode.Deny, "rejected by bob: not today"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const session = "ci-run"
			id := "toolu_headless_" + tc.name
			pre := hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, id)

			start := time.Now()
			first := handle(t, c, pre, headless)
			assert.Less(t, time.Since(start), 10*time.Second, "deferred at once, not after a wait")
			got := preToolUse(t, first)
			assert.Equal(t, claudecode.Defer, got.PermissionDecision, string(first))
			assert.Contains(t, got.PermissionDecisionReason, "claude -p --resume "+session)
			assert.Contains(t, got.AdditionalContext, "decided by toolgate's approvers; deadline ")
			pending := machine.PendingID(session, id)
			e, err := c.Get(t.Context(), pending)
			require.NoError(t, err)
			assert.Equal(t, machine.StatePendingApproval, e.Status, "deferred, not withdrawn")

			assert.Equal(t, claudecode.Defer, preToolUse(t, handle(t, c, pre, headless)).PermissionDecision, "resumed before anyone decided: deferred again")

			d := tc.decision
			d.PendingID = pending
			_, err = c.Decide(t.Context(), d)
			require.NoError(t, err)
			resumed := preToolUse(t, handle(t, c, pre, headless))
			assert.Equal(t, tc.want, resumed.PermissionDecision)
			assert.Contains(t, resumed.AdditionalContext, tc.context)
		})
	}
	t.Run("golden", func(t *testing.T) {
		t.Parallel()
		golden(t, "PreToolUse.defer", handle(t, c, input(claudecode.EventPreToolUse, "Bash", `{"command":"git push origin main"}`, "toolu_defer"), headless))
	})
}

// What a rule decides needs nobody: a headless session gets it at once.
func TestHooks_HeadlessGetsARulesVerdictAtOnce(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	headless := claudecode.Options{Headless: true}
	for cmd, want := range map[string]claudecode.Behavior{"npm test": claudecode.Allow, "rm -rf /": claudecode.Deny} {
		raw, _ := json.Marshal(map[string]string{"command": cmd})
		got := preToolUse(t, handle(t, c, hookInput("ci-rules", claudecode.EventPreToolUse, "Bash", string(raw), "toolu_"+string(want)), headless))
		assert.Equal(t, want, got.PermissionDecision, cmd)
	}
}

// A deferred call whose approval deadline passed under a policy that
// rejects then is denied when the session is resumed, not deferred again.
func TestHooks_HeadlessResumedPastTheDeadlineIsDenied(t *testing.T) {
	t.Parallel()
	c := startGateWith(t, "relay", "intake") // no timer: the hook reads the deadline itself
	const session = "rejects-at-1s"
	pre := hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, "toolu_late")
	headless := claudecode.Options{Headless: true}
	require.Equal(t, claudecode.Defer, preToolUse(t, handle(t, c, pre, headless)).PermissionDecision)
	var got claudecode.PreToolUseDecision
	bustest.Eventually(t, 30*time.Second, 50*time.Millisecond, "the resumed call denied at its deadline", func() (bool, any) {
		got = preToolUse(t, handle(t, c, pre, headless))
		return got.PermissionDecision != claudecode.Defer, got
	})
	assert.Equal(t, claudecode.Deny, got.PermissionDecision)
	assert.Contains(t, got.PermissionDecisionReason, "timed out")
}

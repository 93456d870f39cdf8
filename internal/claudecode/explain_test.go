package claudecode_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// preToolUse reads a PreToolUse answer.
func preToolUse(t *testing.T, answer []byte) claudecode.PreToolUseDecision {
	t.Helper()
	var out claudecode.PreToolUseOutput
	require.NoError(t, json.Unmarshal(answer, &out), string(answer))
	return out.HookSpecificOutput
}

// Every answer tells the model what decided, in a few bounded lines: who
// rejected and who else may decide; the human who approved and how far;
// the grant that approval recorded, on the next call it lets run.
func TestHooks_AdditionalContextNamesTheDecider(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "alice-or-bob" // approvers: [alice, bob]
	var known []string
	decideWhileWaiting := func(id, input string, d wire.DecideRequest) claudecode.PreToolUseDecision {
		t.Helper()
		answer := handleAsync(t.Context(), c, hookInput(session, claudecode.EventPreToolUse, "Bash", input, id), claudecode.Options{})
		e := newPending(t, c, session, "Bash", known...)
		known = append(known, e.PendingID)
		require.Equal(t, machine.PendingID(session, id), e.PendingID)
		d.PendingID = e.PendingID
		_, err := c.Decide(t.Context(), d)
		require.NoError(t, err)
		return preToolUse(t, <-answer)
	}

	rejected := decideWhileWaiting("toolu_rejected", `{"command":"git push --force"}`, wire.DecideRequest{By: "alice", Reason: "not on main"})
	assert.Equal(t, claudecode.Deny, rejected.PermissionDecision)
	assert.Contains(t, rejected.AdditionalContext, "rejected by alice: not on main")
	assert.Contains(t, rejected.AdditionalContext, "To get it allowed", "how the agent could get the call allowed")
	assert.Contains(t, rejected.AdditionalContext, "one of alice, bob", "and which approvers decide")

	approved := decideWhileWaiting("toolu_approved", `{"command":"git push"}`, wire.DecideRequest{Approved: true, By: "bob", Reason: "release day", Scope: machine.ScopeSession})
	assert.Equal(t, claudecode.Allow, approved.PermissionDecision)
	assert.Contains(t, approved.AdditionalContext, "approved by bob for the rest of this session: release day")

	again := preToolUse(t, handle(t, c, hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, "toolu_granted"), claudecode.Options{}))
	assert.Equal(t, claudecode.Allow, again.PermissionDecision)
	assert.Contains(t, again.AdditionalContext, "by a grant given earlier: grant ")
	assert.Contains(t, again.AdditionalContext, "by bob (session alice-or-bob)")

	for _, d := range []claudecode.PreToolUseDecision{rejected, approved, again} {
		lines := strings.Split(d.AdditionalContext, "\n")
		assert.LessOrEqual(t, len(lines), 4, d.AdditionalContext)
		for _, l := range lines {
			assert.LessOrEqual(t, len(l), 300, l)
		}
	}
}

// A call nobody decides names who may, and its deadline.
func TestHooks_AdditionalContextOfAnAskNamesTheDeadline(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	got := preToolUse(t, handle(t, c, hookInput("alice-or-bob", claudecode.EventPreToolUse, "Write", `{"file_path":"a.go"}`, "toolu_ask"),
		claudecode.Options{Wait: 200 * time.Millisecond}))
	assert.Equal(t, claudecode.Ask, got.PermissionDecision)
	assert.Contains(t, got.AdditionalContext, "decided by one of alice, bob; deadline 20")
	assert.Contains(t, got.AdditionalContext, "Claude Code's own prompt decides now")
}

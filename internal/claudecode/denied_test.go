package claudecode_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// permissionDeniedInput is a PermissionDenied hook's input, as Claude Code
// documents it: the call its classifier denied in auto mode, and why.
func permissionDeniedInput(session, toolInput, toolUseID string) []byte {
	data, _ := json.Marshal(map[string]any{
		"session_id": session, "transcript_path": "/home/u/.claude/projects/p/" + session + ".jsonl", "cwd": "/home/u/p",
		"permission_mode": "auto", "hook_event_name": "PermissionDenied", "tool_name": "Bash", "tool_input": json.RawMessage(toolInput),
		"tool_use_id": toolUseID, "reason": "the command pushes to a shared remote",
	})
	return data
}

// A call Claude Code's classifier denied is recorded in toolgate,
// REJECTED_BY_POLICY with the classifier as what decided, unless the
// policy denies it itself (its rule stands), or asks a human about it:
// then a human may overrule the classifier, and once approved the answer
// asks Claude Code to retry; the retried call (a new tool_use_id) is
// allowed by that approval, once, and settled by its PostToolUse.
func TestHooks_PermissionDeniedRecordsTheClassifierAndAHumanMayOverrule(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "auto-mode"
	opts := claudecode.Options{Caller: "claude-code", Wait: 5 * time.Second}

	// The policy would let it run: the classifier's denial stands.
	assert.JSONEq(t, `{}`, string(handle(t, c, permissionDeniedInput(session, `{"command":"npm test"}`, "toolu_run"), opts)))
	e, err := c.Get(t.Context(), machine.PendingID(session, "cc-classifier_toolu_run"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByPolicy, e.Status)
	assert.Contains(t, e.StatusReason, "claude-code:classifier denied it")
	assert.Equal(t, machine.DecidedByClassifier, e.DecidedBy, "the classifier decided")

	// The policy denies it: its rule stands.
	assert.JSONEq(t, `{}`, string(handle(t, c, permissionDeniedInput(session, `{"command":"rm -rf /"}`, "toolu_rm"), opts)))
	e, err = c.Get(t.Context(), machine.PendingID(session, "cc-classifier_toolu_rm"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByPolicy, e.Status)
	assert.Contains(t, e.StatusReason, `rules.deny "Bash(rm -rf *)"`)

	// The policy asks a human about it: alice overrules the classifier.
	answer := handleAsync(t.Context(), c, permissionDeniedInput(session, `{"command":"git push"}`, "toolu_push"), opts)
	pending := newPending(t, c, session, "Bash")
	assert.Equal(t, machine.PendingID(session, "cc-classifier_toolu_push"), pending.PendingID)
	assert.Contains(t, pending.StatusReason, "claude-code:classifier denied it; a human may overrule that")
	_, err = c.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: true, By: "alice", Reason: "expected push"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"hookSpecificOutput":{"hookEventName":"PermissionDenied","retry":true}}`, string(<-answer))

	// The model retries: a new tool_use_id, allowed by alice's approval.
	retry := hookInput(session, claudecode.EventPreToolUse, "Bash", `{"command":"git push"}`, "toolu_retry")
	var in map[string]any
	require.NoError(t, json.Unmarshal(retry, &in))
	in["permission_mode"] = "auto"
	retry, _ = json.Marshal(in)
	got := preToolUse(t, handle(t, c, retry, opts))
	assert.Equal(t, claudecode.Allow, got.PermissionDecision, got.PermissionDecisionReason)
	assert.Contains(t, got.PermissionDecisionReason, "overruling Claude Code's classifier")
	assert.Contains(t, got.AdditionalContext, "approved by alice once: expected push")
	handle(t, c, postToolUse(session, "Bash", `{"command":"git push"}`, "toolu_retry", `{"stdout":"ok"}`, ""), opts)
	e, err = c.Get(t.Context(), pending.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, e.Status, "the retry ran once, under the approval")
}

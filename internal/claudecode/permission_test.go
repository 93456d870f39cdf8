package claudecode_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// hookInput is a hook input as Claude Code documents it for event; a
// PermissionRequest carries no tool_use_id (pass "") and carries
// permission_suggestions, which toolgate ignores.
func hookInput(session, event, tool, toolInput, toolUseID string) []byte {
	in := map[string]any{
		"session_id": session, "transcript_path": "/home/u/.claude/projects/p/" + session + ".jsonl", "cwd": "/home/u/p",
		"permission_mode": "default", "hook_event_name": event, "tool_name": tool, "tool_input": json.RawMessage(toolInput),
	}
	if toolUseID != "" {
		in["tool_use_id"] = toolUseID
	}
	if event == claudecode.EventPermissionRequest {
		in["permission_suggestions"] = []any{map[string]any{"type": "addRules", "behavior": "allow", "destination": "localSettings",
			"rules": []any{map[string]any{"toolName": tool}}}}
	}
	data, _ := json.Marshal(in)
	return data
}

// postToolUse is a PostToolUse (or, with errMsg, PostToolUseFailure) input.
func postToolUse(session, tool, toolInput, toolUseID, response, errMsg string) []byte {
	in := map[string]any{"session_id": session, "hook_event_name": claudecode.EventPostToolUse, "tool_name": tool,
		"tool_input": json.RawMessage(toolInput), "tool_use_id": toolUseID}
	if errMsg != "" {
		in["hook_event_name"], in["error"] = claudecode.EventPostToolUseFailure, errMsg
	} else {
		in["tool_response"] = json.RawMessage(response)
	}
	data, _ := json.Marshal(in)
	return data
}

// handleAsync answers raw in a goroutine; the answer (or the error) comes
// on the channel.
func handleAsync(ctx context.Context, g claudecode.Gate, raw []byte, opts claudecode.Options) <-chan []byte {
	done := make(chan []byte, 1)
	go func() {
		in, err := claudecode.ParseInput(raw)
		if err != nil {
			done <- []byte("parse: " + err.Error())
			return
		}
		out, err := claudecode.Handle(ctx, g, in, opts)
		if err != nil {
			done <- []byte("handle: " + err.Error())
			return
		}
		data, _ := json.Marshal(out)
		done <- data
	}()
	return done
}

// calls lists a session's calls of tool, oldest first.
func calls(t *testing.T, c gateClient, session, tool string) []*machine.Entry {
	t.Helper()
	all, err := c.Calls(t.Context(), session, tool)
	require.NoError(t, err)
	return all
}

func describe(entries []*machine.Entry) string {
	var s []string
	for _, e := range entries {
		s = append(s, fmt.Sprintf("%s %s %s %q", e.PendingID, e.Status, e.ToolArguments, e.StatusReason))
	}
	return fmt.Sprint(s)
}

// newPending waits for a pending call of the session other than those
// known, and returns it.
func newPending(t *testing.T, c gateClient, session, tool string, known ...string) *machine.Entry {
	t.Helper()
	var found *machine.Entry
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "a new pending call in "+session, func() (bool, any) {
		all := calls(t, c, session, tool)
		for _, e := range all {
			if e.Status == machine.StatePendingApproval && !slices.Contains(known, e.PendingID) {
				found = e
				return true, nil
			}
		}
		return false, describe(all)
	})
	return found
}

func permissionDecision(t *testing.T, answer []byte) claudecode.PermissionResult {
	t.Helper()
	var out claudecode.PermissionRequestOutput
	require.NoError(t, json.Unmarshal(answer, &out), string(answer))
	require.Equal(t, claudecode.EventPermissionRequest, out.HookSpecificOutput.HookEventName, string(answer))
	return out.HookSpecificOutput.Decision
}

// A PermissionRequest has no tool_use_id: each one is a call of its own.
// An approval given once answers only the request it was given for, and a
// request withdrawn at its wait leaves the next one to be asked.
func TestPermissionRequest_EachRequestIsACallOfItsOwn(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "perm-own"
	push := hookInput(session, claudecode.EventPermissionRequest, "Bash", `{"command":"git push --force origin main"}`, "")

	// The first: approved once, with the input edited.
	answerA := handleAsync(t.Context(), c, push, claudecode.Options{})
	a := newPending(t, c, session, "Bash")
	_, err := c.Decide(t.Context(), wire.DecideRequest{PendingID: a.PendingID, Approved: true, By: "alice", Scope: machine.ScopeOnce,
		Arguments: json.RawMessage(`{"command":"git push origin feature"}`)})
	require.NoError(t, err)
	allowed := permissionDecision(t, <-answerA)
	assert.Equal(t, claudecode.Allow, allowed.Behavior)
	assert.JSONEq(t, `{"command":"git push origin feature"}`, string(allowed.UpdatedInput))

	// The same request again is asked again, not answered with the first
	// approval; nobody answers it within its wait, so it is withdrawn and
	// Claude Code's dialog shows (the hook answers nothing).
	answerB := handle(t, c, push, claudecode.Options{Wait: 300 * time.Millisecond})
	assert.JSONEq(t, `{}`, string(answerB), "the approval given once is not replayed")
	all := calls(t, c, session, "Bash")
	require.Len(t, all, 2, describe(all))
	b := all[1]
	if b.PendingID == a.PendingID {
		b = all[0]
	}
	assert.NotEqual(t, a.PendingID, b.PendingID)
	assert.Equal(t, machine.StateCancelled, b.Status, describe(all))
	assert.Contains(t, b.StatusReason, "withdrawn: no decision within 300ms")
	assert.JSONEq(t, `{"command":"git push --force origin main"}`, string(b.ToolArguments), "nobody's edit carried over")

	// And a third: neither the approval nor the withdrawal answers it; the
	// approver's answer to it does.
	answerC := handleAsync(t.Context(), c, push, claudecode.Options{})
	third := newPending(t, c, session, "Bash", a.PendingID, b.PendingID)
	_, err = c.Decide(t.Context(), wire.DecideRequest{PendingID: third.PendingID, Approved: false, By: "alice", Reason: "not on main"})
	require.NoError(t, err)
	denied := permissionDecision(t, <-answerC)
	assert.Equal(t, claudecode.Deny, denied.Behavior)
	assert.Contains(t, denied.Message, "not on main")
	assert.Len(t, calls(t, c, session, "Bash"), 3, "three requests, three calls")
}

// A PostToolUse whose tool_use_id names no call settles the oldest open
// call of the same session, tool and input: one per PostToolUse.
func TestPostToolUse_SettlesTheOldestOpenCallOfTheSameInput(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "post-match"
	ask := func(input string) {
		t.Helper()
		got := permissionDecision(t, handle(t, c, hookInput(session, claudecode.EventPermissionRequest, "Bash", input, ""), claudecode.Options{}))
		require.Equal(t, claudecode.Allow, got.Behavior, "the policy allows npm test")
	}
	ask(`{"command":"npm test"}`)
	first := calls(t, c, session, "Bash")[0]
	// The second is younger by at least a millisecond, toolgate's
	// resolution, so "oldest" is not left to a tie.
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "a millisecond to pass", func() (bool, any) { return time.Now().UnixMilli() > first.RequestedAt, time.Now() })
	ask(`{"command":"npm test"}`)
	ask(`{"command":"npm test -- --watch=false"}`)
	status := func() map[string]machine.State {
		m := map[string]machine.State{}
		for _, e := range calls(t, c, session, "Bash") {
			m[e.PendingID] = e.Status
		}
		return m
	}
	// Listed by key, which is random: tell them apart by input and age.
	var same []*machine.Entry
	var other *machine.Entry
	for _, e := range calls(t, c, session, "Bash") {
		if machine.SameJSON(e.ToolArguments, json.RawMessage(`{"command":"npm test"}`)) {
			same = append(same, e)
		} else {
			other = e
		}
	}
	require.Len(t, same, 2, "%v", status())
	require.NotNil(t, other)
	slices.SortFunc(same, func(a, b *machine.Entry) int { return cmp.Compare(a.RequestedAt, b.RequestedAt) })
	older, younger := same[0], same[1]
	require.Less(t, older.RequestedAt, younger.RequestedAt)
	require.JSONEq(t, `{"command":"npm test -- --watch=false"}`, string(other.ToolArguments))

	// Claude Code's tool_use_id names none of them.
	handle(t, c, postToolUse(session, "Bash", `{"command":"npm test"}`, "toolu_run_1", `{"stdout":"first"}`, ""), claudecode.Options{})
	e, err := c.Get(t.Context(), older.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, e.Status, "the oldest settles first: %v", status())
	assert.JSONEq(t, `{"stdout":"first"}`, string(e.Result))
	assert.Equal(t, machine.StateScheduled, status()[younger.PendingID], "one PostToolUse settles one call")

	handle(t, c, postToolUse(session, "Bash", `{"command":"npm test"}`, "toolu_run_2", "", "exit status 1"), claudecode.Options{})
	e, err = c.Get(t.Context(), younger.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedFailure, e.Status, "%v", status())
	assert.Equal(t, "exit status 1", e.Error)

	// A third run of the same input has no open call left: nothing changes.
	before := status()
	handle(t, c, postToolUse(session, "Bash", `{"command":"npm test"}`, "toolu_run_3", `{}`, ""), claudecode.Options{})
	assert.Equal(t, before, status())
	assert.Equal(t, machine.StateScheduled, before[other.PendingID], "another input is another call")

	handle(t, c, postToolUse(session, "Bash", `{"command":"npm test -- --watch=false"}`, "toolu_run_4", `{"stdout":"ok"}`, ""), claudecode.Options{})
	assert.Equal(t, machine.StateCompletedSuccess, status()[other.PendingID])
}

// An approver's edit is what Claude Code runs, and so what its PostToolUse
// reports as the input: that is the input a call is matched on.
func TestPostToolUse_MatchesTheInputThatRan(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "post-edited"
	answer := handleAsync(t.Context(), c, hookInput(session, claudecode.EventPermissionRequest, "Write", `{"file_path":"/p/a.go","content":"x"}`, ""), claudecode.Options{})
	p := newPending(t, c, session, "Write")
	_, err := c.Decide(t.Context(), wire.DecideRequest{PendingID: p.PendingID, Approved: true, By: "alice", Arguments: json.RawMessage(`{"file_path":"/p/b.go","content":"x"}`)})
	require.NoError(t, err)
	require.Equal(t, claudecode.Allow, permissionDecision(t, <-answer).Behavior)

	handle(t, c, postToolUse(session, "Write", `{"file_path":"/p/a.go","content":"x"}`, "toolu_w1", `{"ok":true}`, ""), claudecode.Options{})
	e, err := c.Get(t.Context(), p.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, e.Status, "the original input is not what ran")

	handle(t, c, postToolUse(session, "Write", `{"content":"x","file_path":"/p/b.go"}`, "toolu_w2", `{"ok":true}`, ""), claudecode.Options{})
	e, err = c.Get(t.Context(), p.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, e.Status, "the edited input, in any key order")
}

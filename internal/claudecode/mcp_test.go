package claudecode_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
)

func TestMCPApprove_AllowEchoesInputDenyNamesTheRule(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	ctx := t.Context()
	server := claudecode.NewMCPServer(c, "mcp-session", "0.0.1", claudecode.Options{})
	st, ct := mcp.NewInMemoryTransports()
	_, err := server.Connect(ctx, st, nil)
	require.NoError(t, err)
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })

	call := func(tool string, input map[string]any, id string) claudecode.PermissionResult {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: claudecode.ApproveToolName,
			Arguments: map[string]any{"tool_name": tool, "input": input, "tool_use_id": id}})
		require.NoError(t, err)
		require.False(t, res.IsError)
		require.Len(t, res.Content, 1)
		var out claudecode.PermissionResult
		require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out))
		return out
	}
	allowed := call("Bash", map[string]any{"command": "npm test"}, "toolu_1")
	assert.Equal(t, claudecode.Allow, allowed.Behavior)
	assert.JSONEq(t, `{"command":"npm test"}`, string(allowed.UpdatedInput), "the original input is echoed")

	denied := call("Bash", map[string]any{"command": "rm -rf /"}, "toolu_2")
	assert.Equal(t, claudecode.Deny, denied.Behavior)
	assert.Contains(t, denied.Message, `rules.deny "Bash(rm -rf *)"`)

	e, err := c.Get(ctx, machine.PendingID("mcp-session", "toolu_1"))
	require.NoError(t, err)
	assert.Equal(t, "toolgate", e.CallerBotID, "the caller is the name of the credential the server connects with")
}

// Claude Code may send the tool fields it does not send today: they are
// accepted and ignored.
func TestMCPApprove_ToleratesUnknownFields(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	ctx := t.Context()
	st, ct := mcp.NewInMemoryTransports()
	_, err := claudecode.NewMCPServer(c, "mcp-extra", "0.0.1", claudecode.Options{}).Connect(ctx, st, nil)
	require.NoError(t, err)
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })

	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: claudecode.ApproveToolName, Arguments: map[string]any{
		"tool_name": "Bash", "input": map[string]any{"command": "npm test"}, "tool_use_id": "toolu_x",
		"permission_suggestions": []any{map[string]any{"type": "addRules"}}, "agent_id": "sub-1", "a_future_field": 42,
	}})
	require.NoError(t, err)
	require.Len(t, res.Content, 1)
	text := res.Content[0].(*mcp.TextContent).Text
	require.False(t, res.IsError, text)
	var out claudecode.PermissionResult
	require.NoError(t, json.Unmarshal([]byte(text), &out))
	assert.Equal(t, claudecode.Allow, out.Behavior)

	// An empty input is one.
	res, err = session.CallTool(ctx, &mcp.CallToolParams{Name: claudecode.ApproveToolName, Arguments: map[string]any{"tool_name": "Read", "input": map[string]any{}}})
	require.NoError(t, err)
	text = res.Content[0].(*mcp.TextContent).Text
	require.False(t, res.IsError, text)
	require.NoError(t, json.Unmarshal([]byte(text), &out))
	assert.Equal(t, claudecode.Allow, out.Behavior, "Read is read-only")
}

// The schema requires tool_name and input, as Claude Code's
// permission-prompt input has them; a call without input is refused.
func TestMCPApprove_SchemaRequiresToolNameAndInput(t *testing.T) {
	t.Parallel()
	session := mcpSession(t, startGate(t), "mcp-schema", claudecode.Options{})
	tools, err := session.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var approve *mcp.Tool
	for _, tool := range tools.Tools {
		if tool.Name == claudecode.ApproveToolName {
			approve = tool
		}
	}
	require.NotNil(t, approve, "the approve tool is listed")
	schema, err := json.Marshal(approve.InputSchema)
	require.NoError(t, err)
	var s struct {
		Required []string `json:"required"`
	}
	require.NoError(t, json.Unmarshal(schema, &s))
	assert.ElementsMatch(t, []string{"tool_name", "input"}, s.Required)

	res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: claudecode.ApproveToolName, Arguments: map[string]any{"tool_name": "Read"}})
	require.NoError(t, err)
	require.True(t, res.IsError, "a call without input is refused")
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, `missing properties: ["input"]`)
}

// The tool has no prompt to hand a call back to: one nobody decides within
// the wait is denied, and says so; neither what the tool answers nor what
// the call records speaks of Claude Code's prompt, or of Go's contexts.
func TestMCPApprove_NobodyDecidesIsDenied(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	session := mcpSession(t, c, "mcp-undecided", claudecode.Options{Timeout: 2 * time.Second}) // a 1s wait

	res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: claudecode.ApproveToolName,
		Arguments: map[string]any{"tool_name": "Write", "input": map[string]any{"file_path": "a"}, "tool_use_id": "toolu_w"}})
	require.NoError(t, err)
	var out claudecode.PermissionResult
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out))
	assert.Equal(t, claudecode.Deny, out.Behavior)
	assert.Contains(t, out.Message, "withdrawn: no decision within 1s: denied (the permission-prompt tool denies what toolgate does not decide)")
	assert.NotContains(t, out.Message, "handed back")
	e, err := c.Get(t.Context(), machine.PendingID("mcp-undecided", "toolu_w"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateCancelled, e.Status)
	assert.Equal(t, "withdrawn: no decision within 1s", e.StatusReason)

	// A request Claude Code cancels withdraws its call, saying so in words.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := session.CallTool(ctx, &mcp.CallToolParams{Name: claudecode.ApproveToolName,
			Arguments: map[string]any{"tool_name": "Write", "input": map[string]any{"file_path": "b"}, "tool_use_id": "toolu_c"}})
		done <- err
	}()
	id := machine.PendingID("mcp-undecided", "toolu_c")
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the call waits", func() (bool, any) {
		e, err := c.Get(t.Context(), id)
		return err == nil && e.Status == machine.StatePendingApproval, err
	})
	cancel()
	<-done
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the call is withdrawn", func() (bool, any) {
		e, err := c.Get(t.Context(), id)
		return err == nil && e.Status == machine.StateCancelled, e
	})
	e, err = c.Get(t.Context(), id)
	require.NoError(t, err)
	assert.Equal(t, "withdrawn: Claude Code stopped waiting (it cancelled the request, or closed the connection)", e.StatusReason)
}

// mcpSession connects a client to the approve tool's server.
func mcpSession(t *testing.T, g claudecode.Gate, conversation string, opts claudecode.Options) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	_, err := claudecode.NewMCPServer(g, conversation, "0.0.1", opts).Connect(t.Context(), st, nil)
	require.NoError(t, err)
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })
	return session
}

// The hook tool answers an mcp_tool hook handler: the hook's input in (its
// fields as the handler's input fills them in, tool_input as an object or
// as its JSON in a string), the command hook's JSON out.
func TestMCPHookTool_AnswersAsTheCommandHook(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	ctx := t.Context()
	st, ct := mcp.NewInMemoryTransports()
	_, err := claudecode.NewMCPServer(c, "unused", "0.0.1", claudecode.Options{}).Connect(ctx, st, nil)
	require.NoError(t, err)
	session, err := mcp.NewClient(&mcp.Implementation{Name: "claude-code"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })

	hook := func(args map[string]any) claudecode.PreToolUseDecision {
		t.Helper()
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: claudecode.HookToolName, Arguments: args})
		require.NoError(t, err)
		require.False(t, res.IsError)
		require.Len(t, res.Content, 1)
		return preToolUse(t, []byte(res.Content[0].(*mcp.TextContent).Text))
	}
	in := func(toolInput any, id string) map[string]any {
		return map[string]any{"session_id": "mcp-tool-hook", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": toolInput, "tool_use_id": id}
	}
	allowed := hook(in(`{"command":"npm test"}`, "toolu_s"))
	assert.Equal(t, claudecode.Allow, allowed.PermissionDecision, "tool_input as its JSON in a string")
	assert.Contains(t, allowed.AdditionalContext, "by its policy")
	denied := hook(in(map[string]any{"command": "rm -rf /"}, "toolu_o"))
	assert.Equal(t, claudecode.Deny, denied.PermissionDecision, "tool_input as an object")
	e, err := c.Get(ctx, machine.PendingID("mcp-tool-hook", "toolu_o"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByPolicy, e.Status, "the call is the hook input's: its session and tool_use_id")

	deferred := in(`{"command":"git push"}`, "toolu_h")
	deferred["headless"] = true
	assert.Equal(t, claudecode.Defer, hook(deferred).PermissionDecision, "headless: as the command hook's --headless")

	bad := hook(in("rm -rf /", "toolu_b"))
	assert.Equal(t, claudecode.Deny, bad.PermissionDecision, "an input it cannot read blocks the call")
	assert.Contains(t, bad.PermissionDecisionReason, "tool_input: want an object")
}

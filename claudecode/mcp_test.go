package claudecode_test

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/claudecode"
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

	// Without an input at all: the empty one.
	res, err = session.CallTool(ctx, &mcp.CallToolParams{Name: claudecode.ApproveToolName, Arguments: map[string]any{"tool_name": "Read"}})
	require.NoError(t, err)
	text = res.Content[0].(*mcp.TextContent).Text
	require.False(t, res.IsError, text)
	require.NoError(t, json.Unmarshal([]byte(text), &out))
	assert.Equal(t, claudecode.Allow, out.Behavior, "Read is read-only")
}

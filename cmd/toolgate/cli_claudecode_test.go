package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/claudecode"
)

// runHook runs `toolgate hook claude-code` with input on stdin. Not
// parallel: stdin is the process's.
func runHook(t *testing.T, input string, args ...string) (int, claudecode.PreToolUseOutput, string) {
	t.Helper()
	stdin = strings.NewReader(input)
	t.Cleanup(func() { stdin = nil })
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append([]string{"hook", "claude-code"}, args...), &stdout, &stderr)
	var out claudecode.PreToolUseOutput
	if stdout.Len() > 0 {
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	}
	return code, out, stderr.String()
}

const preToolUse = `{"session_id":"sess-1","transcript_path":"/t.jsonl","cwd":"/p","permission_mode":"default",` +
	`"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"%s"}`

func TestHookCommand_AnswersFromToolgate(t *testing.T) {
	nats, _ := startWithHTTP(t, hookPolicy)

	code, out, _ := runHook(t, fmt.Sprintf(preToolUse, "npm test", "h1"), "--nats", nats)
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Allow, out.HookSpecificOutput.PermissionDecision)

	code, out, stderr := runHook(t, fmt.Sprintf(preToolUse, "rm -rf /", "h2"), "--nats", nats)
	assert.Equal(t, 0, code, "a deny is an answer, not a failure")
	assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, `rules.deny "Bash(rm -rf *)"`)
	assert.Contains(t, stderr, "deny")

	code, _, stderr = runHook(t, `{"hook_event_name":"PreToolUse"}`, "--nats", nats)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "session_id: required")
}

func TestHookCommand_UnreachableFollowsOnError(t *testing.T) {
	closed := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	input := fmt.Sprintf(preToolUse, "ls", "u1")

	code, out, stderr := runHook(t, input, "--nats", closed)
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Ask, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, stderr, "toolgate hook:")

	code, out, _ = runHook(t, input, "--nats", closed, "--on-error", "deny")
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "could not decide")

	code, _, stderr = runHook(t, input, "--on-error", "maybe")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "--on-error")
}

func TestMCPServer_OverStdioAgainstTheBinary(t *testing.T) {
	t.Parallel()
	nats, _ := startWithHTTP(t, hookPolicy)
	cmd := exec.Command(toolgateBinary(t), "mcp", "--nats", nats, "--conversation", "mcp-e2e")
	session, err := mcp.NewClient(&mcp.Implementation{Name: "claude-code-test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })

	tools, err := session.ListTools(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 1)
	assert.Equal(t, "approve", tools.Tools[0].Name)

	approve := func(command, id string) claudecode.PermissionResult {
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "approve",
			Arguments: map[string]any{"tool_name": "Bash", "input": map[string]any{"command": command}, "tool_use_id": id}})
		require.NoError(t, err)
		require.Len(t, res.Content, 1)
		var out claudecode.PermissionResult
		require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out))
		return out
	}
	allowed := approve("npm test", "m1")
	assert.Equal(t, claudecode.Allow, allowed.Behavior)
	assert.JSONEq(t, `{"command":"npm test"}`, string(allowed.UpdatedInput))
	denied := approve("rm -rf /", "m2")
	assert.Equal(t, claudecode.Deny, denied.Behavior)
	assert.Contains(t, denied.Message, "rm -rf")
}

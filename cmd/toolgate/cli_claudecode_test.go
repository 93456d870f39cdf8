package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
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
	// The hook runs as the agent whose calls it gates.
	agent := server.CredsPath(servetest.DataDir(t, nats), "agent")

	code, out, _ := runHook(t, fmt.Sprintf(preToolUse, "npm test", "h1"), "--nats", nats, "--nats-creds", agent)
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Allow, out.HookSpecificOutput.PermissionDecision)

	code, out, stderr := runHook(t, fmt.Sprintf(preToolUse, "rm -rf /", "h2"), "--nats", nats, "--nats-creds", agent)
	assert.Equal(t, 0, code, "a deny is an answer, not a failure")
	assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, `rules.deny "Bash(rm -rf *)"`)
	assert.Contains(t, stderr, "deny")

	code, _, stderr = runHook(t, `{"hook_event_name":"PreToolUse"}`, "--nats", nats, "--nats-creds", agent)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "session_id: required")
}

func TestHookCommand_UnreachableFollowsOnError(t *testing.T) {
	closed := fmt.Sprintf("nats://127.0.0.1:%d", bustest.FreePort(t))
	input := fmt.Sprintf(preToolUse, "ls", "u1")

	code, out, stderr := runHook(t, input, "--nats", closed)
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision, "a gate that cannot ask blocks")
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "could not decide")
	assert.Contains(t, stderr, "toolgate hook:")

	code, out, _ = runHook(t, input, "--nats", closed, "--on-error", "ask")
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Ask, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "could not decide")

	code, _, stderr = runHook(t, input, "--on-error", "maybe")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "--on-error")
}

func TestMCPServer_OverStdioAgainstTheBinary(t *testing.T) {
	t.Parallel()
	nats, _ := startWithHTTP(t, hookPolicy)
	cmd := exec.Command(toolgateBinary(t), "mcp", "--nats", nats, "--nats-creds", server.CredsPath(servetest.DataDir(t, nats), "agent"), "--conversation", "mcp-e2e")
	session, err := mcp.NewClient(&mcp.Implementation{Name: "claude-code-test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })

	tools, err := session.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"approve", "hook"}, names)

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

// hookBoundsPolicy keeps the calls of conversation "kept-pending" pending
// past their approval deadline.
const hookBoundsPolicy = hookPolicy + `
conversations:
  kept-pending:
    approvalTimeoutMs: 100
    autoRejectOnTimeout: false
`

const permissionRequestInput = `{"session_id":"%s","transcript_path":"/t.jsonl","cwd":"/p","permission_mode":"default",` +
	`"hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"%s"},"permission_suggestions":[]}`

// The hook never waits past its timeout: --wait 0 is the most --timeout
// allows, even for a call its policy keeps pending for ever, and a --wait
// the timeout does not allow is refused before anything is asked.
func TestHookCommand_WaitIsBoundedByTheTimeout(t *testing.T) {
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: hookBoundsPolicy})
	nats := served(t, g)
	agent := server.CredsPath(g.Data, "agent")

	start := time.Now()
	code, out, stderr := runHook(t, fmt.Sprintf(permissionRequestInput, "kept-pending", "git push"), "--nats", nats, "--nats-creds", agent,
		"--wait", "0", "--timeout", "4")
	assert.Equal(t, 0, code, stderr)
	assert.Zero(t, out, "no decision: Claude Code's dialog shows")
	elapsed := time.Since(start)
	assert.GreaterOrEqual(t, elapsed, 2*time.Second, "--wait 0 under --timeout 4: the timeout less half of it")
	assert.Less(t, elapsed, 4*time.Second, "answered before Claude Code's timeout")
	all, err := g.Client.List(t.Context(), wire.ListRequest{ConversationID: "kept-pending"})
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, machine.StateCancelled, all[0].Status)
	assert.Contains(t, all[0].StatusReason, "withdrawn: no decision within 2s")

	for _, args := range [][]string{{"--wait", "10m"}, {"--wait", "300", "--timeout", "300"}, {"--timeout", "-1"}} {
		code, _, stderr = runHook(t, fmt.Sprintf(permissionRequestInput, "refused", "git push"), append([]string{"--nats", nats, "--nats-creds", agent}, args...)...)
		assert.Equal(t, exitUsage, code, args)
		assert.Contains(t, stderr, "--wait, --timeout:", args)
	}
	all, err = g.Client.List(t.Context(), wire.ListRequest{ConversationID: "refused"})
	require.NoError(t, err)
	assert.Empty(t, all, "nothing was asked")
}

// Claude Code kills a hook at its timeout with SIGTERM: the hook withdraws
// the call it waited for, saying why, and prints nothing.
func TestHookCommand_SIGTERMWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: hookPolicy})
	cmd := exec.Command(toolgateBinary(t), "hook", "claude-code", "--nats", g.NATSURL, "--nats-creds", server.CredsPath(g.Data, "agent"), "--timeout", "600")
	cmd.Stdin = strings.NewReader(fmt.Sprintf(permissionRequestInput, "killed", "git push"))
	var stdout, stderr lockedBuffer // read while the process writes
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var pending *machine.Entry
	deadline := time.Now().Add(30 * time.Second)
	for pending == nil {
		all, err := g.Client.List(t.Context(), wire.ListRequest{ConversationID: "killed"})
		require.NoError(t, err)
		if len(all) == 1 && all[0].Status == machine.StatePendingApproval {
			pending = all[0]
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the hook exited before its call was pending: %v; stdout %q, stderr %q, calls %v", err, stdout.String(), stderr.String(), all)
		case <-time.After(10 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no pending call after 30s; calls %v, stderr %q", all, stderr.String())
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		assert.NoError(t, err, "exits 0: Claude Code reads nothing from a hook it stopped; stderr %q", stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the hook did not exit after SIGTERM; stderr %q", stderr.String())
	}
	assert.Empty(t, stdout.String(), "prints nothing")
	assert.Contains(t, stderr.String(), "stopped (terminated signal received)")
	e, err := g.Client.Get(t.Context(), pending.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCancelled, e.Status)
	assert.Contains(t, e.StatusReason, "Claude Code stopped waiting (terminated signal received)")
	assert.Equal(t, "agent", e.CallerBotID)
}

// lockedBuffer is a bytes.Buffer a process writes to while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A headless session (--headless) defers a call that waits for a human;
// the resumed session's hook, the same input, answers from the decision
// an approver gave through the CLI.
func TestHookCommand_HeadlessDefersUntilDecided(t *testing.T) {
	nats, _ := startWithHTTP(t, hookPolicy)
	agent := server.CredsPath(servetest.DataDir(t, nats), "agent")
	input := fmt.Sprintf(preToolUse, "git push", "headless1")

	code, out, _ := runHook(t, input, "--nats", nats, "--nats-creds", agent, "--headless")
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Defer, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, out.HookSpecificOutput.AdditionalContext, "deadline")

	r := cli(t, nats, "approve", machine.PendingID("sess-1", "headless1"), "--reason", "ship it", as(t, nats, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	code, out, _ = runHook(t, input, "--nats", nats, "--nats-creds", agent, "--headless")
	assert.Equal(t, 0, code)
	assert.Equal(t, claudecode.Allow, out.HookSpecificOutput.PermissionDecision)
	assert.Contains(t, out.HookSpecificOutput.AdditionalContext, "approved by alice once: ship it")
}

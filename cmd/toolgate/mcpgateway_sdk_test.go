package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway/npmtest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestMCPGateway_TheTypeScriptSDKsTasksOutliveASIGKILL runs `toolgate
// mcp-gateway --http` as a process, and against it the TypeScript SDK
// 1.32.2's own task API (npmtest's tasks-client.mjs) and MCP Inspector's
// CLI. With a policy that asks for write_file, the SDK gets a working task
// at once, and after `toolgate approve` the server's result. A second
// task, created before the gateway is SIGKILLed, answers from the gateway
// started again, to a new client: working, then after `toolgate approve`
// its result. Inspector, in the modern protocol era, lists the gateway's
// tools and calls one.
func TestMCPGateway_TheTypeScriptSDKsTasksOutliveASIGKILL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := npmtest.Install(ctx, t)
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: gatewayPolicy})
	config := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, "servers:\n  files:\n    command: [%q]\n", upstreamServer(t)), 0o600))
	addr := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	url := "http://" + addr + "/mcp"

	// gateway starts `toolgate mcp-gateway --http addr` and waits until
	// it listens; the func it returns SIGKILLs it.
	gateway := func() func() {
		t.Helper()
		cmd := exec.Command(toolgateBinary(t), "mcp-gateway", "--config", config, "--http", addr,
			"--nats", g.NATSURL, "--nats-creds", server.CredsPath(g.Data, "agent"))
		kill := startGateway(t, cmd)
		bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the gateway listening on "+addr, func() (bool, any) {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				_ = c.Close()
			}
			return err == nil, err
		})
		return kill
	}
	approve := func(id string) {
		t.Helper()
		r := cli(t, "", "approve", id, "--reason", "fine", "--nats", g.NATSURL, "--nats-creds", server.CredsPath(g.Data, "approver"))
		require.Equal(t, 0, r.code, r.stderr)
	}
	textOf := func(t *testing.T, result any) string {
		t.Helper()
		res, ok := result.(map[string]any)
		require.True(t, ok, "no result: %v", result)
		text, isError := toolText(t, res)
		assert.False(t, isError, "%v", res)
		return text
	}
	taskOf := func(msg map[string]any) map[string]any {
		t.Helper()
		task, ok := msg["task"].(map[string]any)
		require.True(t, ok, "no task: %v", msg)
		return task
	}

	kill := gateway()
	sdk := npmtest.StartTasksClient(ctx, t, dir, url)
	first := sdk.Call("write_file", map[string]any{"path": "a.txt", "content": "x"})
	created := npmtest.Next(t, first)
	require.Equal(t, "taskCreated", created["type"], "answered at once with a task: %v", created)
	firstID := taskOf(created)["taskId"].(string)
	assert.Equal(t, "working", taskOf(created)["status"])
	approve(firstID)
	for msg := npmtest.Next(t, first); msg["type"] != "result"; msg = npmtest.Next(t, first) {
		require.Equal(t, "taskStatus", msg["type"], "%v", msg)
	}
	assert.Equal(t, "wrote a.txt", textOf(t, sdk.Do("result", map[string]any{"taskId": firstID})["result"]))

	second := sdk.Call("write_file", map[string]any{"path": "b.txt", "content": "y"})
	secondID := taskOf(npmtest.Next(t, second))["taskId"].(string)
	sdk.RequireValid("initialize", "tools/call", "tasks/get", "tasks/result")
	kill()

	gateway()
	again := npmtest.StartTasksClient(ctx, t, dir, url)
	assert.Equal(t, "working", taskOf(again.Do("get", map[string]any{"taskId": secondID}))["status"],
		"the new process answers for the task an earlier one created")
	approve(secondID)
	assert.Equal(t, "wrote b.txt", textOf(t, again.Do("result", map[string]any{"taskId": secondID})["result"]),
		"tasks/result waits for the run, and answers with its result")
	assert.Equal(t, "completed", taskOf(again.Do("get", map[string]any{"taskId": secondID}))["status"])
	again.RequireValid("tasks/get", "tasks/result")

	// MCP Inspector's CLI, in the modern protocol era (2026-07-28, which
	// it insists on: a server that does not speak it is refused).
	inspector := func(args ...string) map[string]any {
		t.Helper()
		cmd := exec.CommandContext(ctx, npmtest.Node(dir), append([]string{
			filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js"),
			"--cli", "--protocol-era", "modern", "--transport", "http", "--server-url", url, "--format", "json", "--quiet"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(npmtest.Env(dir), "PATH="+filepath.Dir(npmtest.Node(dir))+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir())
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "inspector %v:\n%s\n%s", args, stdout.String(), stderr.String())
		var out struct {
			Result map[string]any `json:"result"`
		}
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "inspector %v:\n%s", args, stdout.String())
		require.NotNil(t, out.Result, "inspector %v:\n%s", args, stdout.String())
		return out.Result
	}
	listed := inspector("--method", "tools/list")
	var names []string
	tools, ok := listed["tools"].([]any)
	require.True(t, ok, "inspector's tools/list: %v", listed)
	for _, tool := range tools {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	assert.Contains(t, names, "echo", "%v", listed)
	assert.NotContains(t, names, "delete_file", "the policy denies it whatever its arguments")
	called := inspector("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=hi")
	assert.Equal(t, "echo: hi", textOf(t, called), "%v", called)
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestMCPGateway_TasksOutliveAGatewaySIGKILLed drives `toolgate
// mcp-gateway` over stdio with a JSON-RPC client written by hand that
// declares the tasks extension. A call that asks is answered at once with
// a task; the same call again gets the same task; another is withdrawn
// with tasks/cancel; the gateway is SIGKILLed and started again; the new
// process says the first task is working; an approver approves it, and
// approves a third call a deny rule added meanwhile matches; tasks/get
// reports the upstream's real result for the first, a refusal naming the
// rule for the third; the upstream saw exactly one call.
func TestMCPGateway_TasksOutliveAGatewaySIGKILLed(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: gatewayPolicy})
	_, approver := g.ConnectAs(t, "approver")
	dir := t.TempDir()
	logPath := filepath.Join(dir, "upstream.log")
	config := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, "servers:\n  files:\n    command: [%q]\n    env: {UPSTREAM_LOG: %q}\n", upstreamServer(t), logPath), 0o600))

	// gateway starts `toolgate mcp-gateway` and initializes it as a
	// client that declares the tasks extension; kill SIGKILLs it.
	gateway := func() (r *rpc, kill func()) {
		t.Helper()
		cmd := exec.Command(toolgateBinary(t), "mcp-gateway", "--config", config,
			"--nats", g.NATSURL, "--nats-creds", server.CredsPath(g.Data, "agent"), "--inbox-url", "https://toolgate.example")
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		kill = startGateway(t, cmd)
		r = newRPC(t, stdin, stdout)
		init := r.result(r.call(1, "initialize", map[string]any{
			"protocolVersion": "2025-11-25",
			"capabilities":    map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
			"clientInfo":      map[string]any{"name": "tasks-client", "version": "0.1"},
		}))
		exts, _ := init["capabilities"].(map[string]any)["extensions"].(map[string]any)
		require.Contains(t, exts, "io.modelcontextprotocol/tasks", "the gateway offers the extension: %v", init)
		r.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
		return r, kill
	}
	id := 100
	task := func(r *rpc, args map[string]any) map[string]any {
		t.Helper()
		id++
		res := r.result(r.call(id, "tools/call", map[string]any{"name": "write_file", "arguments": args}))
		require.Equal(t, "task", res["resultType"], "answered at once with a task: %v", res)
		return res
	}
	get := func(r *rpc, taskID any) map[string]any {
		t.Helper()
		id++
		res := r.result(r.call(id, "tasks/get", map[string]any{"taskId": taskID}))
		require.Equal(t, "complete", res["resultType"])
		require.Equal(t, taskID, res["taskId"])
		return res
	}
	until := func(r *rpc, taskID any, status string) map[string]any {
		t.Helper()
		var last map[string]any
		bustest.Eventually(t, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("task %v %s", taskID, status), func() (bool, any) {
			last = get(r, taskID)
			return last["status"] == status, last
		})
		return last
	}

	first, kill := gateway()
	asked := task(first, map[string]any{"path": "a.txt", "content": "x"})
	taskID := asked["taskId"]
	assert.Equal(t, "working", asked["status"])
	assert.Contains(t, asked["statusMessage"], "waiting for an approver to decide on "+taskID.(string))
	assert.Contains(t, asked["statusMessage"], "decide at https://toolgate.example/#/calls/"+taskID.(string))
	assert.NotZero(t, asked["pollIntervalMs"])
	assert.Equal(t, taskID, task(first, map[string]any{"path": "a.txt", "content": "x"})["taskId"],
		"the same call while it waits: the same task")
	withdrawn := task(first, map[string]any{"path": "b.txt", "content": "x"})["taskId"]
	id++
	assert.Equal(t, "complete", first.result(first.call(id, "tasks/cancel", map[string]any{"taskId": withdrawn}))["resultType"])
	assert.Equal(t, "cancelled", get(first, withdrawn)["status"])
	denied := task(first, map[string]any{"path": "/etc/passwd", "content": "x"})["taskId"]

	kill()
	second, _ := gateway()
	assert.Equal(t, "working", get(second, taskID)["status"], "the new process answers for the task an earlier one created")

	_, err := g.Client.SetPolicy(t.Context(), strings.Replace(gatewayPolicy, `deny: ["mcp__files__delete_file"]`,
		`deny: ["mcp__files__delete_file", "mcp__files__write_file(/etc/**)"]`+"\n  matchArgument: {mcp__files: path}", 1))
	require.NoError(t, err)
	for _, pid := range []any{taskID, denied} {
		_, err := approver.Decide(t.Context(), wire.DecideRequest{PendingID: pid.(string), Approved: true, Reason: "fine"})
		require.NoError(t, err)
	}
	_, err = approver.Decide(t.Context(), wire.DecideRequest{PendingID: withdrawn.(string), Approved: true})
	assert.Error(t, err, "a withdrawn call cannot be approved")

	done := until(second, taskID, "completed")
	text, isError := toolText(t, done["result"].(map[string]any))
	assert.False(t, isError)
	assert.Equal(t, "wrote a.txt", text, "the upstream's real result")
	refused := until(second, denied, "completed")
	text, isError = toolText(t, refused["result"].(map[string]any))
	assert.True(t, isError)
	assert.Contains(t, text, `now denies it: rules.deny "mcp__files__write_file(/etc/**)" (default)`)

	data, err := os.ReadFile(logPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 1, "the upstream saw exactly one call: %s", data)
	var c struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &c))
	assert.Equal(t, "write_file", c.Tool)
	assert.JSONEq(t, `{"path":"a.txt","content":"x"}`, string(c.Args))
	for pid, want := range map[any]machine.State{taskID: machine.StateCompletedSuccess, withdrawn: machine.StateCancelled, denied: machine.StateCompletedFailure} {
		e, err := approver.Get(t.Context(), pid.(string))
		require.NoError(t, err)
		assert.Equal(t, want, e.Status, "%v: %s", pid, e.StatusReason)
	}
}

// startGateway starts cmd, a `toolgate mcp-gateway`, in a process group
// of its own (its upstreams die with it), and returns what SIGKILLs it;
// it is killed when the test ends, and its stderr logged if it failed.
func startGateway(t *testing.T, cmd *exec.Cmd) (kill func()) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &bustest.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	kill = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			t.Logf("the gateway's stderr:\n%s", stderr)
		}
	})
	return kill
}

package mcpgateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/internal/mcpgateway/npmtest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestCoreTasks_TheTypeScriptSDKsTaskAPI runs the TypeScript SDK's own
// task API (client.experimental.tasks, the 2025-11-25 revision's tasks)
// against the gateway over streamable HTTP, every message about tasks
// checked against that revision's published schema: the gateway offers
// tasks for tools/call and every tool as one that may be a task; a call
// that asks is a working task at once, and once approved its server's
// result; one the policy lets run is run and answered; a refusal (denied,
// rejected) fails the task, tasks/result saying why; tasks/cancel
// withdraws one waiting and refuses one ended; tasks/list lists them.
func TestCoreTasks_TheTypeScriptSDKsTaskAPI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := npmtest.Install(ctx, t)
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{PollInterval: 100 * time.Millisecond})
	c := npmtest.StartTasksClient(ctx, t, dir, serveLoopback(t, gw))
	assert.Equal(t, map[string]any{"call": map[string]any{}}, c.Capabilities()["tasks"].(map[string]any)["requests"].(map[string]any)["tools"],
		"tools/call may be a task")
	tools := c.Do("tools", nil)["tools"].([]any)
	require.NotEmpty(t, tools)
	for _, tool := range tools {
		assert.Equal(t, map[string]any{"taskSupport": "optional"}, tool.(map[string]any)["execution"], "%v", tool)
	}

	// Asked: a working task at once, then the server's result.
	asked := c.Call("write_file", map[string]any{"path": "a.txt", "content": "x"})
	created := npmtest.Next(t, asked)
	require.Equal(t, "taskCreated", created["type"], "%v", created)
	task := created["task"].(map[string]any)
	id := task["taskId"].(string)
	assert.Equal(t, "working", task["status"])
	assert.Contains(t, task["statusMessage"], "waiting for an approver to decide on "+id)
	assert.Equal(t, id, e.only("mcp__files__write_file", machine.StatePendingApproval).PendingID, "the task is the toolgate call")
	assert.Equal(t, "working", c.Do("get", map[string]any{"taskId": id})["task"].(map[string]any)["status"])
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id, Approved: true, Reason: "fine"})
	require.NoError(t, err)
	result := until(t, asked, "result")
	assert.Equal(t, "wrote a.txt", firstText(t, result["result"]), "the server's own result")
	again := c.Do("result", map[string]any{"taskId": id})["result"]
	assert.Equal(t, "wrote a.txt", firstText(t, again), "tasks/result answers again")
	require.Len(t, e.received(), 1, "the server ran the call once")

	// Allowed at once: a task all the same, run at once.
	echo := c.Call("echo", map[string]any{"text": "hi"})
	assert.Equal(t, "taskCreated", npmtest.Next(t, echo)["type"])
	assert.Equal(t, "echo: hi", firstText(t, until(t, echo, "result")["result"]))

	// Denied by policy and rejected: failed, tasks/result saying why.
	denied := c.Call("delete_file", map[string]any{"path": "a.txt"})
	deniedID := npmtest.Next(t, denied)["task"].(map[string]any)["taskId"].(string)
	until(t, denied, "error")
	status := c.Do("get", map[string]any{"taskId": deniedID})["task"].(map[string]any)
	assert.Equal(t, "failed", status["status"])
	assert.Contains(t, status["statusMessage"], "denied")
	refusal := c.Do("result", map[string]any{"taskId": deniedID})["result"].(map[string]any)
	assert.Equal(t, true, refusal["isError"])

	rejected := c.Call("write_file", map[string]any{"path": "b.txt"})
	rejectedID := npmtest.Next(t, rejected)["task"].(map[string]any)["taskId"].(string)
	// tasks/result waits for the decision.
	waiting := make(chan map[string]any, 1)
	go func() { waiting <- c.Try("result", map[string]any{"taskId": rejectedID}) }()
	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: rejectedID, Approved: false, Reason: "not b"})
	require.NoError(t, err)
	select {
	case r := <-waiting:
		assert.Contains(t, firstText(t, r["result"]), "rejected by approver: not b")
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/result did not answer once the call was rejected")
	}
	until(t, rejected, "error")

	// Cancelled while it waits; a second cancel is refused.
	withdrawn := c.Call("write_file", map[string]any{"path": "c.txt"})
	withdrawnID := npmtest.Next(t, withdrawn)["task"].(map[string]any)["taskId"].(string)
	assert.Equal(t, "cancelled", c.Do("cancel", map[string]any{"taskId": withdrawnID})["task"].(map[string]any)["status"])
	e.ends(withdrawnID, machine.StateCancelled, "cancelled by the MCP client")
	refused := c.Try("cancel", map[string]any{"taskId": withdrawnID})["error"].(map[string]any)
	assert.EqualValues(t, -32602, refused["code"], "%v", refused)
	assert.Contains(t, refused["message"], "already in terminal status 'cancelled'")
	until(t, withdrawn, "error")

	listed := map[string]string{}
	for _, task := range c.Do("list", nil)["tasks"].([]any) {
		listed[task.(map[string]any)["taskId"].(string)] = task.(map[string]any)["status"].(string)
	}
	assert.Equal(t, "completed", listed[id])
	assert.Equal(t, "failed", listed[deniedID])
	assert.Equal(t, "failed", listed[rejectedID])
	assert.Equal(t, "cancelled", listed[withdrawnID])
	assert.Len(t, e.received(), 2, "only the approved call and the allowed one reached the server")

	c.RequireValid("initialize", "tools/list", "tools/call", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel")
}

// until is the first message of a call's stream of type typ, the ones
// before it the task's statuses.
func until(t *testing.T, stream <-chan map[string]any, typ string) map[string]any {
	t.Helper()
	for {
		msg := npmtest.Next(t, stream)
		if msg["type"] == typ {
			return msg
		}
		require.Equal(t, "taskStatus", msg["type"], "%v", msg)
	}
}

// firstText is the first text of a tool result as JSON.
func firstText(t *testing.T, result any) string {
	t.Helper()
	res, ok := result.(map[string]any)
	require.True(t, ok, "no result: %v", result)
	content, _ := res["content"].([]any)
	require.NotEmpty(t, content, "result: %v", res)
	return content[0].(map[string]any)["text"].(string)
}

// TestCoreTasks_OnStdio: a client of the 2025-11-25 tasks on stdio, written
// by hand, gets its task at once and hears notifications/tasks/status as
// it ends, valid by that revision's published schema; the task is answered
// in the extension's form to a client that declares the extension, and the
// extension's methods are not the core form's.
func TestCoreTasks_OnStdio(t *testing.T) {
	t.Parallel()
	e := start(t)
	files := map[string]mcpgateway.Upstream{"files": e.files()}
	r := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "core-stdio", nil)
	created := r.result("tools/call", map[string]any{"name": "write_file", "arguments": map[string]any{"path": "a.txt"}, "task": map[string]any{"ttl": 60000}})
	task := created["task"].(map[string]any)
	id := task["taskId"].(string)
	assert.Equal(t, "working", task["status"])
	assert.Contains(t, created["_meta"].(map[string]any)["io.modelcontextprotocol/model-immediate-response"], "waiting for an approver to decide on "+id)
	err := r.rpcError("tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{}})
	assert.EqualValues(t, -32601, err["code"], "the extension's method: %v", err)

	ext := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "extension", withTasks)
	assert.Equal(t, "complete", ext.get(id)["resultType"], "the same task, in the extension's form")
	err = ext.rpcError("tasks/result", map[string]any{"taskId": id})
	assert.EqualValues(t, -32601, err["code"], "the core form's method: %v", err)

	_, derr := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id, Approved: true})
	require.NoError(t, derr)
	var heard map[string]any
	deadline := time.After(30 * time.Second)
	for heard == nil {
		select {
		case n := <-r.notes:
			if p, _ := n["params"].(map[string]any); n["method"] == "notifications/tasks/status" && p["status"] == "completed" {
				heard = n
			}
		case <-deadline:
			t.Fatal("no notifications/tasks/status completed within 30s")
		}
	}
	assert.Equal(t, id, heard["params"].(map[string]any)["taskId"])
	res := r.result("tasks/result", map[string]any{"taskId": id})
	assert.Equal(t, "wrote a.txt", firstText(t, res))
	npmtest.RequireValidBy(t.Context(), t, npmtest.Install(t.Context(), t), []npmtest.Check{
		{Schema: "CreateTaskResultV1Schema", Value: created}, {Schema: "TaskStatusNotificationV1Schema", Value: heard},
		{Schema: "CallToolResultV1Schema", Value: res},
	})
}

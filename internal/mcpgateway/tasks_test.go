package mcpgateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/internal/mcpgateway/npmtest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// raw is an MCP client written by hand, on one stdio-like stream: JSON-RPC
// lines, its responses by id, and the notifications it hears.
type raw struct {
	t       *testing.T
	w       io.Writer
	mu      sync.Mutex
	next    int
	waiting map[int]chan map[string]any
	notes   chan map[string]any
}

// serveRaw serves one session of gw over a pipe and connects a raw client
// to it, initialized on 2025-11-25 with caps (nil: none) as client name.
func serveRaw(t *testing.T, gw *mcpgateway.Gateway, name string, caps map[string]any) *raw {
	t.Helper()
	return serveRawOn(t, gw, "2025-11-25", name, caps)
}

// serveRawOn is serveRaw on the protocol revision protocol.
func serveRawOn(t *testing.T, gw *mcpgateway.Gateway, protocol, name string, caps map[string]any) *raw {
	t.Helper()
	gwEnd, clientEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, &mcp.IOTransport{Reader: gwEnd, Writer: gwEnd}) }()
	t.Cleanup(func() {
		_ = clientEnd.Close()
		cancel()
		<-served
	})
	r := &raw{t: t, w: clientEnd, waiting: map[int]chan map[string]any{}, notes: make(chan map[string]any, 100)}
	go func() {
		sc := bufio.NewScanner(clientEnd)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var msg map[string]any
			if json.Unmarshal(sc.Bytes(), &msg) != nil {
				continue
			}
			id, isResponse := msg["id"].(float64)
			if msg["method"] != nil {
				if !isResponse {
					select {
					case r.notes <- msg:
					default:
					}
				}
				continue
			}
			r.mu.Lock()
			ch := r.waiting[int(id)]
			r.mu.Unlock()
			if ch != nil {
				ch <- msg
			}
		}
	}()
	if caps == nil {
		caps = map[string]any{}
	}
	if name == "" {
		return r // a 2026-07-28 client: no initialize
	}
	r.result("initialize", map[string]any{"protocolVersion": protocol, "capabilities": caps,
		"clientInfo": map[string]any{"name": name, "version": "1"}})
	r.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return r
}

// withTasks are the capabilities of a client that declares the tasks
// extension.
var withTasks = map[string]any{"extensions": map[string]any{mcpgateway.TasksExtension: map[string]any{}}}

func (r *raw) send(msg map[string]any) {
	data, err := json.Marshal(msg)
	require.NoError(r.t, err)
	_, err = r.w.Write(append(data, '\n'))
	require.NoError(r.t, err)
}

// call sends a request and waits for its response.
func (r *raw) call(method string, params any) map[string]any {
	r.t.Helper()
	r.mu.Lock()
	r.next++
	id := r.next
	ch := make(chan map[string]any, 1)
	r.waiting[id] = ch
	r.mu.Unlock()
	r.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case msg := <-ch:
		return msg
	case <-time.After(30 * time.Second):
		r.t.Fatalf("no response to %s within 30s", method)
		return nil
	}
}

// result is call's result, failing on an error response.
func (r *raw) result(method string, params any) map[string]any {
	r.t.Helper()
	msg := r.call(method, params)
	require.Nil(r.t, msg["error"], "%s: error response: %v", method, msg)
	res, ok := msg["result"].(map[string]any)
	require.True(r.t, ok, "%s: no result: %v", method, msg)
	return res
}

// rpcError is call's error, failing on a result.
func (r *raw) rpcError(method string, params any) map[string]any {
	r.t.Helper()
	msg := r.call(method, params)
	e, ok := msg["error"].(map[string]any)
	require.True(r.t, ok, "%s: want an error, got %v", method, msg)
	return e
}

// task calls tool and returns the task it is answered with.
func (r *raw) task(tool string, args map[string]any) map[string]any {
	r.t.Helper()
	res := r.result("tools/call", map[string]any{"name": tool, "arguments": args})
	require.Equal(r.t, "task", res["resultType"], "a call that waits on a human is answered with a task: %v", res)
	return res
}

// get polls a task.
func (r *raw) get(id any) map[string]any {
	r.t.Helper()
	res := r.result("tasks/get", map[string]any{"taskId": id})
	require.Equal(r.t, "complete", res["resultType"])
	return res
}

// until polls a task until its status is status, and returns it.
func (r *raw) until(id any, status string) map[string]any {
	r.t.Helper()
	var last map[string]any
	bustest.Eventually(r.t, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("task %v %s", id, status), func() (bool, any) {
		last = r.get(id)
		return last["status"] == status, last
	})
	return last
}

// note waits for a notifications/tasks about id in status.
func (r *raw) note(id any, status string) map[string]any {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	var seen []any
	for {
		select {
		case n := <-r.notes:
			p, _ := n["params"].(map[string]any)
			if n["method"] == "notifications/tasks" && p["taskId"] == id && p["status"] == status {
				return p
			}
			seen = append(seen, n)
		case <-deadline:
			r.t.Fatalf("no notifications/tasks for %v %s within 30s; heard %v", id, status, seen)
			return nil
		}
	}
}

// resultText is the first text of a task's result, and its isError.
func resultText(t *testing.T, task map[string]any) (string, bool) {
	t.Helper()
	res, ok := task["result"].(map[string]any)
	require.True(t, ok, "no result: %v", task)
	content, _ := res["content"].([]any)
	require.NotEmpty(t, content, "result: %v", res)
	isError, _ := res["isError"].(bool)
	return content[0].(map[string]any)["text"].(string), isError
}

// TestTasks_ApprovalAnsweredWithATask: a client that declares the tasks
// extension gets a task at once for a call that asks; the same call again
// while it waits gets the same task; tasks/get says who must decide, then
// the upstream's real result once approved, which ran once; the client
// hears each end in notifications/tasks; each message is valid by the
// extension's published schema.
func TestTasks_ApprovalAnsweredWithATask(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{
		PollInterval: 500 * time.Millisecond, InboxURL: "https://toolgate.example/"})
	r := serveRaw(t, gw, "tasks-test", withTasks)

	init := r.result("tools/list", map[string]any{})
	require.NotEmpty(t, init["tools"])
	created := r.task("write_file", map[string]any{"path": "a.txt", "content": "x"})
	id := created["taskId"]
	pending := e.only("mcp__files__write_file", machine.StatePendingApproval)
	assert.Equal(t, pending.PendingID, id, "the task is the toolgate call")
	assert.Equal(t, "working", created["status"])
	assert.EqualValues(t, 500, created["pollIntervalMs"])
	assert.Contains(t, created["statusMessage"], "waiting for an approver to decide on "+pending.PendingID)
	assert.Contains(t, created["statusMessage"], "decide at https://toolgate.example/#/calls/"+pending.PendingID)
	require.NotZero(t, pending.ApprovalTimeoutAt)
	assert.EqualValues(t, pending.ApprovalTimeoutAt-pending.RequestedAt+time.Hour.Milliseconds(), created["ttlMs"],
		"the approval deadline, and the hour a claim gives the run")
	assert.Contains(t, created["statusMessage"], ", by "+time.UnixMilli(pending.ApprovalTimeoutAt).UTC().Format(time.RFC3339Nano))

	again := r.task("write_file", map[string]any{"content": "x", "path": "a.txt"})
	assert.Equal(t, id, again["taskId"], "the same call while it waits: the same task")
	other := r.task("write_file", map[string]any{"path": "b.txt", "content": "x"})
	assert.NotEqual(t, id, other["taskId"], "other arguments: another task")

	assert.Equal(t, "working", r.get(id)["status"])
	assert.Empty(t, e.received(), "nothing reaches the upstream before the approval")
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: true, Reason: "fine"})
	require.NoError(t, err)

	heard := r.note(id, "completed")
	text, isError := resultText(t, heard)
	assert.False(t, isError)
	assert.Equal(t, "wrote a.txt", text)
	done := r.until(id, "completed")
	text, isError = resultText(t, done)
	assert.False(t, isError)
	assert.Equal(t, "wrote a.txt", text, "the upstream's real result")
	got := e.received()
	require.Len(t, got, 1, "the upstream ran the call once")
	assert.JSONEq(t, `{"path":"a.txt","content":"x"}`, string(got[0].Args))
	entry, err := e.approver.Get(t.Context(), pending.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, entry.Status)

	// Rejected: the refusal, who and why, as a tool error.
	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: other["taskId"].(string), Approved: false, Reason: "not b"})
	require.NoError(t, err)
	refused := r.until(other["taskId"], "completed")
	text, isError = resultText(t, refused)
	assert.True(t, isError)
	assert.Contains(t, text, "rejected by approver: not b")
	assert.Len(t, e.received(), 1, "the rejected call never reached the upstream")

	npmtest.RequireValidBy(t.Context(), t, npmtest.Install(t.Context(), t), []npmtest.Check{
		{Schema: "CreateTaskResultV2Schema", Value: created}, {Schema: "GetTaskResultV2Schema", Value: done},
		{Schema: "GetTaskResultV2Schema", Value: refused}, {Schema: "GetTaskResultV2Schema", Value: r.get(other["taskId"])},
		{Schema: "TaskStatusNotificationV2Schema", Value: map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks", "params": heard}},
	})
}

// TestTasks_CancelWithdrawsTheCall: tasks/cancel withdraws the call, which
// the upstream never sees.
func TestTasks_CancelWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})
	r := serveRaw(t, gw, "cancel-task", withTasks)

	id := r.task("write_file", map[string]any{"path": "c.txt"})["taskId"]
	ack := r.result("tasks/cancel", map[string]any{"taskId": id})
	assert.Equal(t, "complete", ack["resultType"])
	heard := r.note(id, "cancelled")
	cancelled := r.get(id)
	assert.Equal(t, "cancelled", cancelled["status"])
	npmtest.RequireValidBy(t.Context(), t, npmtest.Install(t.Context(), t), []npmtest.Check{
		{Schema: "CancelTaskResultV2Schema", Value: ack}, {Schema: "GetTaskResultV2Schema", Value: cancelled},
		{Schema: "TaskStatusNotificationV2Schema", Value: map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks", "params": heard}},
	})
	e.ends(id.(string), machine.StateCancelled, "cancelled by the MCP client")
	// Approving it now is refused: it is withdrawn.
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id.(string), Approved: true})
	assert.Error(t, err)
	assert.Equal(t, "cancelled", r.get(id)["status"])
	assert.Empty(t, e.received(), "the upstream never saw the call")
}

// TestTasks_TheHandleIsNotAuthority: a client on a revision without tasks
// of its own that did not declare the extension is told so (one on
// 2025-11-25 finds the task in that revision's form); a gateway with
// another credential finds no such task; an unknown id is not found.
func TestTasks_TheHandleIsNotAuthority(t *testing.T) {
	t.Parallel()
	e := start(t)
	files := map[string]mcpgateway.Upstream{"files": e.files()}
	r := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "owner", withTasks)
	id := r.task("write_file", map[string]any{"path": "d.txt"})["taskId"]

	plain := serveRawOn(t, e.gateway(files, mcpgateway.Options{}), "2025-06-18", "plain", nil)
	err := plain.rpcError("tasks/get", map[string]any{"taskId": id})
	assert.EqualValues(t, -32021, err["code"], "the extension was not declared: %v", err)
	core := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "core", nil).result("tasks/get", map[string]any{"taskId": id})
	assert.Equal(t, "working", core["status"], "2025-11-25's own tasks: %v", core)
	assert.NotContains(t, core, "resultType", "in that revision's form: %v", core)

	issued, ierr := e.g.Client.IssueCredential(t.Context(), "other-agent", wire.RoleAgent)
	require.NoError(t, ierr)
	path := filepath.Join(t.TempDir(), "other.creds")
	require.NoError(t, os.WriteFile(path, []byte(issued.Creds), 0o600))
	_, other := e.g.ConnectAs(t, path)
	gw, nerr := mcpgateway.New(&mcpgateway.Config{Servers: files}, other, mcpgateway.Options{})
	require.NoError(t, nerr)
	stranger := serveRaw(t, gw, "stranger", withTasks)
	for _, method := range []string{"tasks/get", "tasks/cancel"} {
		err = stranger.rpcError(method, map[string]any{"taskId": id})
		assert.EqualValues(t, -32602, err["code"], "%s: %v", method, err)
		assert.Contains(t, err["message"], "Task not found")
	}
	err = r.rpcError("tasks/get", map[string]any{"taskId": "no-such-task"})
	assert.EqualValues(t, -32602, err["code"])
	assert.Equal(t, "working", r.get(id)["status"], "the stranger's cancel withdrew nothing")
}

// TestTasks_AnotherGatewayRunsTheApprovedCallOnce: the task lives in
// toolgate: a second gateway (another replica, or the same restarted)
// answers tasks/get for a task the first created, and whichever is asked
// after the approval runs the call, once.
func TestTasks_AnotherGatewayRunsTheApprovedCallOnce(t *testing.T) {
	t.Parallel()
	e := start(t)
	files := map[string]mcpgateway.Upstream{"files": e.files()}
	first := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "first", withTasks)
	id := first.task("write_file", map[string]any{"path": "e.txt"})["taskId"]
	second := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "second", withTasks)
	assert.Equal(t, "working", second.get(id)["status"])

	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id.(string), Approved: true})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, r := range []*raw{first, second} {
		wg.Go(func() {
			done := r.until(id, "completed")
			text, isError := resultText(t, done)
			assert.False(t, isError)
			assert.Equal(t, "wrote e.txt", text)
		})
	}
	wg.Wait()
	assert.Len(t, e.received(), 1, "one gateway ran it, once")
}

// TestTasks_AnApprovalTheNewPolicyDeniesDoesNotRun: the policy is
// evaluated again before the upstream call: an approved call that a deny
// rule added since matches is not run, and its task says so; so for a
// held call.
func TestTasks_AnApprovalTheNewPolicyDeniesDoesNotRun(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})
	r := serveRaw(t, gw, "recheck-task", withTasks)
	id := r.task("write_file", map[string]any{"path": "f.txt"})["taskId"]
	cs := e.connect(gw, "recheck-held", nil)
	held := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "g.txt"})
	heldCall := e.pendingIn("recheck-held")

	_, err := e.g.Client.SetPolicy(t.Context(), `
default:
  requiresApprovalTools: all
  rules:
    allow: ["mcp__files__echo"]
    deny: ["mcp__files__write_file", "mcp__files__delete_file"]
`)
	require.NoError(t, err)
	for _, pid := range []string{id.(string), heldCall.PendingID} {
		_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pid, Approved: true, Reason: "before the rule"})
		require.NoError(t, err)
	}

	done := r.until(id, "completed")
	why, isError := resultText(t, done)
	assert.True(t, isError)
	assert.Contains(t, why, "not run: approved by approver, but the policy in force (revision ")
	assert.Contains(t, why, `now denies it: rules.deny "mcp__files__write_file" (default)`)
	a := await(t, held)
	require.NoError(t, a.err)
	assert.True(t, a.res.IsError)
	assert.Contains(t, text(t, a.res), "now denies it")
	assert.Empty(t, e.received(), "neither reached the upstream")
	e.ends(id.(string), machine.StateCompletedFailure, "now denies it")
	e.ends(heldCall.PendingID, machine.StateCompletedFailure, "now denies it")
}

// stateless are the params of a 2026-07-28 request: p with the client's
// revision, name and capabilities in _meta, as that revision has every
// request carry them.
func stateless(p map[string]any, caps map[string]any) map[string]any {
	out := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "stateless", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}}
	for k, v := range p {
		out[k] = v
	}
	return out
}

// TestTasks_OnTheStatelessRevision: a client on 2026-07-28 sends no
// initialize: server/discover offers the extension, a tools/call that
// declares it in its _meta gets a task, which it polls to the upstream's
// result; the gateway speaks 2026-07-28 to its stdio upstream too. The
// same client's call that does not declare it is held, as today.
func TestTasks_OnTheStatelessRevision(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})
	r := serveRaw(t, gw, "", nil)

	found := r.result("server/discover", stateless(nil, withTasks))
	assert.Contains(t, found["supportedVersions"], "2026-07-28")
	caps, _ := found["capabilities"].(map[string]any)
	assert.Contains(t, caps["extensions"], mcpgateway.TasksExtension, "discover offers the extension: %v", found)
	assert.NotNil(t, caps["tools"])

	res := r.result("tools/call", stateless(map[string]any{"name": "write_file", "arguments": map[string]any{"path": "s.txt"}}, withTasks))
	require.Equal(t, "task", res["resultType"], "%v", res)
	id := res["taskId"]
	got := r.result("tasks/get", stateless(map[string]any{"taskId": id}, withTasks))
	assert.Equal(t, "working", got["status"])
	assert.Equal(t, "complete", got["resultType"])
	err := r.rpcError("tasks/get", stateless(map[string]any{"taskId": id}, map[string]any{}))
	assert.EqualValues(t, -32021, err["code"], "a request that does not declare the extension: %v", err)

	_, derr := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id.(string), Approved: true})
	require.NoError(t, derr)
	var done map[string]any
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the task completes", func() (bool, any) {
		done = r.result("tasks/get", stateless(map[string]any{"taskId": id}, withTasks))
		return done["status"] == "completed", done
	})
	text, isError := resultText(t, done)
	assert.False(t, isError)
	assert.Equal(t, "wrote s.txt", text)

	held := r.result("tools/call", stateless(map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}}, map[string]any{}))
	assert.Equal(t, "complete", held["resultType"])
	got2 := e.received()
	require.Len(t, got2, 2)
	assert.Equal(t, "2026-07-28", got2[0].Protocol, "the gateway negotiates its own revision with the upstream")
}

// post sends one JSON-RPC message to the gateway's streamable HTTP, in
// session sid ("" before initialize), and returns the response's message
// (from its body, JSON or an event stream) and the session id it names.
func post(t *testing.T, url, sid string, msg map[string]any) (map[string]any, string) {
	t.Helper()
	data, err := json.Marshal(msg)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if p, ok := msg["params"].(map[string]any); ok && p["taskId"] != nil {
		req.Header.Set("Mcp-Name", p["taskId"].(string)) // as the extension has a client route its tasks
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Less(t, resp.StatusCode, 300, "%s", body)
	if msg["id"] == nil {
		return nil, resp.Header.Get("Mcp-Session-Id")
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "data:")
		var out map[string]any
		if json.Unmarshal([]byte(line), &out) == nil && out["id"] != nil {
			return out, resp.Header.Get("Mcp-Session-Id")
		}
	}
	t.Fatalf("no response in %s", body)
	return nil, ""
}

// TestTasks_OverHTTP: over streamable HTTP a client declaring the
// extension gets its task at once, polls it in its session, and gets the
// result; a task survives the session that created it: after DELETE, a
// new session polls it to its end.
func TestTasks_OverHTTP(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		gw.Close()
		srv.Close()
	})
	open := func(name string) string {
		_, sid := post(t, srv.URL, "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
			"protocolVersion": "2025-11-25", "capabilities": withTasks, "clientInfo": map[string]any{"name": name, "version": "1"}}})
		require.NotEmpty(t, sid)
		post(t, srv.URL, sid, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
		return sid
	}
	sid := open("http-tasks")
	res, _ := post(t, srv.URL, sid, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
		"params": map[string]any{"name": "write_file", "arguments": map[string]any{"path": "h.txt"}}})
	created, _ := res["result"].(map[string]any)
	require.Equal(t, "task", created["resultType"], "%v", res)
	id := created["taskId"]
	res, _ = post(t, srv.URL, sid, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": map[string]any{"taskId": id}})
	assert.Equal(t, "working", res["result"].(map[string]any)["status"], "%v", res)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	entry, err := e.approver.Get(t.Context(), id.(string))
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, entry.Status, "a task is not withdrawn with the session: %s", entry.StatusReason)

	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id.(string), Approved: true})
	require.NoError(t, err)
	later := open("http-tasks-again")
	var got map[string]any
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the task completes", func() (bool, any) {
		res, _ := post(t, srv.URL, later, map[string]any{"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": map[string]any{"taskId": id}})
		got, _ = res["result"].(map[string]any)
		return got["status"] == "completed", res
	})
	text, isError := resultText(t, got)
	assert.False(t, isError)
	assert.Equal(t, "wrote h.txt", text)
	assert.Len(t, e.received(), 1)
}

// TestTasks_IdenticalCallsAtOnceGetOneTask: identical calls sent at once
// are one call to decide, one task.
func TestTasks_IdenticalCallsAtOnceGetOneTask(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := serveRaw(t, e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "at-once", withTasks)
	ids := make(chan any, 4)
	var wg sync.WaitGroup
	for range cap(ids) {
		wg.Go(func() { ids <- r.task("write_file", map[string]any{"path": "same.txt"})["taskId"] })
	}
	wg.Wait()
	close(ids)
	first := <-ids
	for id := range ids {
		assert.Equal(t, first, id)
	}
	assert.Len(t, e.calls("mcp__files__write_file"), 1, "one call to decide")
}

// TestTasks_CancelAnApprovedCallNobodyRan: a call approved while no
// gateway looked at it has not started: tasks/cancel withdraws it, and
// the upstream never sees it.
func TestTasks_CancelAnApprovedCallNobodyRan(t *testing.T) {
	t.Parallel()
	e := start(t)
	files := map[string]mcpgateway.Upstream{"files": e.files()}
	gw := e.gateway(files, mcpgateway.Options{})
	first := serveRaw(t, gw, "gone", withTasks)
	id := first.task("write_file", map[string]any{"path": "late.txt"})["taskId"]
	require.NoError(t, first.w.(net.Conn).Close()) // the client, and its session, are gone
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the first session ended", func() (bool, any) {
		rec := httptest.NewRecorder()
		gw.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return strings.Contains(rec.Body.String(), "\ntoolgate_gateway_sessions 0\n"), rec.Body.String()
	})
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id.(string), Approved: true})
	require.NoError(t, err)

	second := serveRaw(t, e.gateway(files, mcpgateway.Options{}), "second", withTasks)
	second.result("tasks/cancel", map[string]any{"taskId": id})
	assert.Equal(t, "cancelled", second.get(id)["status"])
	e.ends(id.(string), machine.StateCancelled, "cancelled by the MCP client")
	assert.Empty(t, e.received())
}

// TestTasks_ADecisionPageOfferedToAClientThatOpensURLs: a 2026-07-28
// client that opens URLs (elicitation.url) is offered its waiting call's
// page in the inbox, as the task's input request; once it answers, the
// task works on until the call is decided.
func TestTasks_ADecisionPageOfferedToAClientThatOpensURLs(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{InboxURL: "https://toolgate.example/inbox/"})
	r := serveRaw(t, gw, "", nil)
	caps := map[string]any{"extensions": withTasks["extensions"], "elicitation": map[string]any{"url": map[string]any{}}}

	res := r.result("tools/call", stateless(map[string]any{"name": "write_file", "arguments": map[string]any{"path": "u.txt"}}, caps))
	require.Equal(t, "task", res["resultType"], "%v", res)
	id := res["taskId"].(string)
	got := r.result("tasks/get", stateless(map[string]any{"taskId": id}, caps))
	require.Equal(t, "input_required", got["status"], "%v", got)
	asks, _ := got["inputRequests"].(map[string]any)
	require.Len(t, asks, 1, "%v", got)
	for _, ask := range asks {
		req := ask.(map[string]any)
		assert.Equal(t, "elicitation/create", req["method"])
		params := req["params"].(map[string]any)
		assert.Equal(t, "url", params["mode"])
		assert.Equal(t, "https://toolgate.example/inbox/#/calls/"+id, params["url"])
		assert.Contains(t, params["message"], "waiting for an approver to decide on "+id)
	}
	plain := r.result("tasks/get", stateless(map[string]any{"taskId": id}, withTasks))
	assert.Equal(t, "working", plain["status"], "a request that does not open URLs is offered nothing")

	var key string
	for k := range asks {
		key = k
	}
	ack := r.result("tasks/update", stateless(map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept"}}}, caps))
	assert.Equal(t, "complete", ack["resultType"])
	assert.Equal(t, "working", r.result("tasks/get", stateless(map[string]any{"taskId": id}, caps))["status"], "answered: not offered again")

	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id, Approved: true})
	require.NoError(t, err)
	var done map[string]any
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the task completes", func() (bool, any) {
		done = r.result("tasks/get", stateless(map[string]any{"taskId": id}, caps))
		return done["status"] == "completed", done
	})
	text, _ := resultText(t, done)
	assert.Equal(t, "wrote u.txt", text)
}

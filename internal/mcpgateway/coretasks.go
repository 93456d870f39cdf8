package mcpgateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The 2025-11-25 revision's own tasks, which the TypeScript SDK 1.x and
// other clients of that revision implement: a tools/call whose params
// carry a task is answered at once with a CreateTaskResult (the task,
// working), and the client polls it with tasks/get, fetches what the call
// answered with tasks/result (which waits until the task ends), lists its
// tasks with tasks/list and withdraws one with tasks/cancel. The gateway
// serves them over the same durable call as the extension (callAsTask):
// the task is the toolgate call, its id the pendingId.
//
// They differ from the extension on the wire (ttl and pollInterval, not
// ttlMs and pollIntervalMs; the result apart, in tasks/result) and in one
// rule: a tool error result fails the task, so a refused call is failed,
// where the extension has it completed.

// protocolCoreTasks is the revision whose own tasks the gateway serves to
// a client that does not declare the extension.
const protocolCoreTasks = "2025-11-25"

// The _meta keys of the core form.
const (
	// metaTask holds, on a tools/call the gateway received, the task its
	// client asked for (params.task, which the SDK's params do not keep:
	// liftTask moves it).
	metaTask = "dev.toolgate/task"
	// metaRelatedTask names the task a tasks/result answer belongs to.
	metaRelatedTask = "io.modelcontextprotocol/related-task"
	// metaImmediateResponse is what a client may tell its model at once
	// about a call turned into a task.
	metaImmediateResponse = "io.modelcontextprotocol/model-immediate-response"
)

// taskForm is which tasks a client speaks.
type taskForm int

const (
	formNone      taskForm = iota
	formExtension          // io.modelcontextprotocol/tasks (tasks.go)
	formCore               // the 2025-11-25 revision's own
)

// coreTasksCapability is the server capability of the core form: the
// tasks may be listed and cancelled, and tools/call may ask for one.
var coreTasksCapability = map[string]any{
	"list": map[string]any{}, "cancel": map[string]any{},
	"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
}

// coreTask is a task as the core form has it (its Task).
type coreTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is null for no limit.
	TTL          *int64 `json:"ttl"`
	PollInterval int64  `json:"pollInterval,omitempty"`
}

// coreOf is t in the core form. A call the server answered with an error
// result, or that was refused (whose result is the refusal, an error
// result), is failed, saying why.
func coreOf(t Task) coreTask {
	c := coreTask{TaskID: t.TaskID, Status: t.Status, StatusMessage: t.StatusMessage, CreatedAt: t.CreatedAt,
		LastUpdatedAt: t.LastUpdatedAt, TTL: t.TTLMs, PollInterval: t.PollIntervalMs}
	switch t.Status {
	case TaskInputRequired:
		// The one input the gateway asks for is the extension's decision
		// page, offered to no client of this form.
		c.Status = TaskWorking
	case TaskCompleted:
		var res mcp.CallToolResult
		if json.Unmarshal(t.Result, &res) == nil && res.IsError {
			c.Status, c.StatusMessage = TaskFailed, resultText(&res)
		}
	}
	return c
}

// createTaskResult answers a tools/call that asked for a task.
type createTaskResult struct {
	mcp.ResultBase
	Task coreTask `json:"task"`
}

// coreTaskResult answers tasks/get and tasks/cancel.
type coreTaskResult struct {
	mcp.ResultBase
	coreTask
}

// listTasksResult answers tasks/list.
type listTasksResult struct {
	mcp.ResultBase
	Tasks      []coreTask `json:"tasks"`
	NextCursor string     `json:"nextCursor,omitempty"`
}

// listTasksParams are tasks/list's.
type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

// coreCreated is the tools/call result that hands the client task t.
func coreCreated(t Task) mcp.Result {
	r := &createTaskResult{Task: coreOf(t)}
	r.Meta = mcp.Meta{MetaPendingID: t.TaskID, metaImmediateResponse: t.StatusMessage}
	return r
}

// coreResult is what tasks/result answers for the ended task t: what the
// tools/call would have answered without a task, a result or a JSON-RPC
// error, the result naming its task. A result a server on 2026-07-28 gave
// loses the resultType that revision added, which 2025-11-25 has not.
func coreResult(t Task) (mcp.Result, error) {
	if t.Error != nil {
		return nil, &jsonrpc.Error{Code: t.Error.Code, Message: t.Error.Message}
	}
	result := t.Result
	if len(result) == 0 { // cancelled: no result of its own
		result = mustJSON(toolError(t.StatusMessage, t.TaskID))
	}
	var res map[string]any
	if err := json.Unmarshal(result, &res); err != nil || res == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("toolgate: the result of %s is not a tool result: %v", t.TaskID, err)}
	}
	delete(res, "resultType")
	meta, _ := res["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[metaRelatedTask] = map[string]any{"taskId": t.TaskID}
	res["_meta"] = meta
	return &objectResult{object: res}, nil
}

// objectResult is a result whose JSON is object.
type objectResult struct {
	mcp.ResultBase
	object map[string]any
}

func (r *objectResult) MarshalJSON() ([]byte, error) { return json.Marshal(r.object) }

// form is which tasks the session's client speaks, for a request whose
// _meta is meta: the extension when it declares it; else the core form
// when the session is on the revision that has it.
func (s *session) form(meta mcp.Meta) taskForm {
	switch {
	case declaresTasks(meta, s.clientCaps):
		return formExtension
	case s.protocol == protocolCoreTasks:
		return formCore
	}
	return formNone
}

// asksForTask reports whether a tools/call whose _meta is meta asked for a
// task in the core form, which the session serves.
func (s *session) asksForTask(meta mcp.Meta) bool {
	_, ok := meta[metaTask]
	return ok && s.form(meta) == formCore
}

// callAsCoreTask submits the call and answers with its task, however
// toolgate decides it: a call it lets run at once runs in the background,
// and a refusal is a failed task. As for the extension, a call identical
// to one of the credential's that waits gets that one's task.
func (s *session) callAsCoreTask(ctx context.Context, call machine.Call) (mcp.Result, error) {
	gw := s.gw
	e, err := s.submitOnce(ctx, call)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("toolgate: %s was not run: submit: %v", call.ToolName, err)}
	}
	e = s.follow(ctx, e)
	gw.log.Info("tools/call answered with a task (2025-11-25)", "tool", call.ToolName, "pendingId", e.PendingID, "status", e.Status)
	return gw.tasks.created(gw.taskOf(ctx, e, false), formCore), nil
}

// taskResult is task id once it has ended, waiting for it meanwhile (as
// tasks/result does): the session runs the call once it may, as for
// tasks/get.
func (s *session) taskResult(ctx context.Context, id string) (Task, error) {
	for {
		e, err := s.entryOf(ctx, id)
		if err != nil {
			return Task{}, err
		}
		switch e = s.follow(ctx, e); {
		case e.Status.Terminal():
			return s.gw.taskOf(ctx, e, false), nil
		case e.Runnable(time.Now()):
			// Its claim failed: the next look tries again, in a while.
			select {
			case <-ctx.Done():
				return Task{}, ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		// Await answers once the call may run (the session then runs
		// it) or has ended, never for one running: it waits for its end.
		if _, err := s.gw.gate.Await(ctx, id); err != nil && ctx.Err() != nil {
			return Task{}, ctx.Err()
		}
	}
}

// cancelCoreTask withdraws the call of task id as the core form has it:
// one that has not started is withdrawn, and its task cancelled; one that
// has ended is refused, as one running is, which toolgate cannot withdraw
// from its server.
func (s *session) cancelCoreTask(ctx context.Context, id string) (Task, error) {
	e, err := s.entryOf(ctx, id)
	if err != nil {
		return Task{}, err
	}
	ended := func(e *machine.Entry) error {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("Cannot cancel task: already in terminal status '%s'", coreOf(s.gw.taskOf(ctx, e, false)).Status)}
	}
	if e.Status.Terminal() {
		return Task{}, ended(e)
	}
	if e.Status != machine.StateExecuting {
		switch c, err := s.gw.gate.Cancel(ctx, id, "", taskCancelReason); {
		case err == nil:
			s.gw.log.Info("tasks/cancel: withdrawn", "pendingId", id)
			e = c
		case errors.Is(err, machine.ErrConflict):
			// Claimed or ended between the read and the cancel.
			if e, err = s.entryOf(ctx, id); err != nil {
				return Task{}, err
			}
		default:
			return Task{}, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolgate could not withdraw task " + id + ": " + err.Error()}
		}
	}
	switch t := s.gw.taskOf(ctx, e, false); {
	case t.Status == TaskCancelled:
		go s.notifyTask(id)
		return t, nil
	case e.Status == machine.StateExecuting:
		return Task{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Cannot cancel task: its MCP server is running it"}
	}
	return Task{}, ended(e)
}

// tasksPage is how many tasks a tasks/list answer holds at most.
const tasksPage = 50

// listTasks is a page of the tasks of the gateway's credential (every call
// it made through this gateway's servers: each is a task tasks/get
// answers for), newest first, from after the task cursor names.
func (s *session) listTasks(ctx context.Context, cursor string) ([]Task, string, error) {
	all, err := s.gw.gate.List(ctx, wire.ListRequest{})
	if err != nil {
		return nil, "", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolgate could not list the tasks: " + err.Error()}
	}
	all = slices.DeleteFunc(all, func(e *machine.Entry) bool { return !s.gw.ours(e) })
	slices.SortFunc(all, func(a, b *machine.Entry) int {
		return cmp.Or(cmp.Compare(b.RequestedAt, a.RequestedAt), cmp.Compare(a.PendingID, b.PendingID))
	})
	from := 0
	if cursor != "" {
		i := slices.IndexFunc(all, func(e *machine.Entry) bool { return e.PendingID == cursor })
		if i < 0 {
			return nil, "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tasks/list: no such cursor (the task it names is gone)"}
		}
		from = i + 1
	}
	page := all[from:min(from+tasksPage, len(all))]
	tasks := make([]Task, len(page))
	for i, e := range page {
		tasks[i] = s.gw.taskOf(ctx, e, false)
	}
	next := ""
	if from+len(page) < len(all) {
		next = page[len(page)-1].PendingID
	}
	return tasks, next, nil
}

// liftTask moves the task a tools/call message asks for (params.task) into
// its params' _meta, under metaTask, where the gateway finds it: the SDK
// keeps no params it does not know. Any other message is returned as it
// is.
func liftTask(msg []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || !bytes.Equal(bytes.TrimSpace(m["method"]), []byte(`"tools/call"`)) {
		return msg
	}
	params := liftTaskParams(m["params"])
	if params == nil {
		return msg
	}
	m["params"] = params
	out, err := json.Marshal(m)
	if err != nil {
		return msg
	}
	return out
}

// liftTaskParams is a tools/call's params with their task moved into
// _meta, or nil when they ask for none.
func liftTaskParams(raw json.RawMessage) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil || p["task"] == nil {
		return nil
	}
	meta := map[string]json.RawMessage{}
	if p["_meta"] != nil && json.Unmarshal(p["_meta"], &meta) != nil {
		return nil
	}
	meta[metaTask] = p["task"]
	delete(p, "task")
	var err error
	if p["_meta"], err = json.Marshal(meta); err != nil {
		return nil
	}
	out, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	return out
}

// liftingConn is a connection whose tools/call requests have their task
// lifted into _meta (liftTask).
type liftingConn struct{ mcp.Connection }

func (c liftingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
		if params := liftTaskParams(req.Params); params != nil {
			req.Params = params
		}
	}
	return msg, err
}

// coreInitialize is ir with the core form's tasks capability.
func coreInitialize(ir *mcp.InitializeResult) mcp.Result {
	type capabilities struct {
		*mcp.ServerCapabilities
		Tasks map[string]any `json:"tasks"`
	}
	return &struct {
		*mcp.InitializeResult
		Capabilities capabilities `json:"capabilities"`
	}{ir, capabilities{ir.Capabilities, coreTasksCapability}}
}

// coreListTools is res with every tool marked as one a client may call as
// a task (execution.taskSupport optional): the task is the gateway's, its
// server is called as without one.
func coreListTools(res *mcp.ListToolsResult) mcp.Result {
	type tool struct {
		*mcp.Tool
		Execution map[string]any `json:"execution"`
	}
	tools := make([]tool, len(res.Tools))
	for i, t := range res.Tools {
		tools[i] = tool{t, map[string]any{"taskSupport": "optional"}}
	}
	return &struct {
		*mcp.ListToolsResult
		Tools []tool `json:"tools"`
	}{res, tools}
}

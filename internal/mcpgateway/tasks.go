package mcpgateway

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP tasks extension (io.modelcontextprotocol/tasks, the 2026-07-28
// revision's SEP-2663), as the gateway speaks it: a client that declares
// the extension may have its tools/call answered at once with a task
// (resultType "task"), which it polls with tasks/get, withdraws with
// tasks/cancel, and hears of in notifications/tasks where it listens. The
// Go SDK has no tasks: the gateway implements the extension over the
// SDK's custom methods and its own results, behind taskProtocol, which
// the SDK's tasks can take the place of when it has them.

// TasksExtension names the tasks extension, in capabilities' extensions.
const TasksExtension = "io.modelcontextprotocol/tasks"

// The statuses of a task.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// codeMissingCapability is the extension's error for a client that did
// not declare it (Missing Required Client Capability).
const codeMissingCapability = -32021

// Task is a task as tasks/get answers it and notifications/tasks carries
// it (the extension's DetailedTask): its id, status and times, and, once
// it ends, the tool's result (completed) or the JSON-RPC error that
// failed it (failed).
type Task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTLMs is how long after its creation the task may be discarded;
	// nil (null on the wire) for no limit.
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *TaskError      `json:"error,omitempty"`
	// InputRequests (input_required) are what the task asks of the
	// client, by key: here only the decision page, offered to a client
	// that opens URLs (decisionKey).
	InputRequests map[string]inputRequest `json:"inputRequests,omitempty"`
}

// inputRequest is a request of the server's to the client, carried by a
// task: the gateway's is an elicitation/create of mode url.
type inputRequest struct {
	Method string          `json:"method"`
	Params urlElicitParams `json:"params"`
}

// urlElicitParams are a URL-mode elicitation's (2026-07-28): the page to
// open, and why.
type urlElicitParams struct {
	Mode    string `json:"mode"`
	Message string `json:"message"`
	URL     string `json:"url"`
}

// decisionKey keys a task's one input request, the decision page.
const decisionKey = "toolgate-decision-page"

// declaresURLElicitation reports whether a request's own capabilities
// (a 2026-07-28 client's _meta) say the client opens URLs it is asked to
// (elicitation.url).
func declaresURLElicitation(meta mcp.Meta) bool {
	m, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	e, _ := m["elicitation"].(map[string]any)
	_, ok := e["url"]
	return ok
}

// TaskError is the JSON-RPC error of a failed task.
type TaskError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// taskResult is a Task as the result of a request: of tools/call
// (resultType "task", the extension's CreateTaskResult) or of tasks/get
// (resultType "complete").
type taskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	Task
}

// emptyTaskResult acknowledges tasks/cancel and tasks/update.
type emptyTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskParams are the params of tasks/get, tasks/cancel and tasks/update
// (whose inputResponses the gateway never asks for, so ignores).
type taskParams struct {
	mcp.ParamsBase
	TaskID         string          `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// taskHandler answers the tasks' methods for one session, in either form.
type taskHandler interface {
	// getTask is the task id as it stands, to this session's client,
	// for a request whose _meta is meta: errTaskNotFound when there is
	// none it may see.
	getTask(ctx context.Context, id string, meta mcp.Meta) (Task, error)
	// answered records that the client answered the task's input
	// requests named in responses (tasks/update's inputResponses).
	answered(ctx context.Context, id string, responses json.RawMessage) error
	// cancelTask withdraws the task's call, if it still waits.
	cancelTask(ctx context.Context, id string) error
	// cancelCoreTask withdraws the task's call as the core form has it:
	// the task cancelled, or an error saying why it cannot be.
	cancelCoreTask(ctx context.Context, id string) (Task, error)
	// taskResult is the task once it has ended, waiting for it.
	taskResult(ctx context.Context, id string) (Task, error)
	// listTasks is a page of the tasks this client may see, from after
	// cursor, and the cursor of the next page ("" when none).
	listTasks(ctx context.Context, cursor string) ([]Task, string, error)
	// form is which tasks the client speaks, for a request whose _meta
	// is meta.
	form(meta mcp.Meta) taskForm
}

// taskProtocol is how the tasks reach the wire: today the gateway's own
// (jsonrpcTasks), over the SDK's custom methods.
type taskProtocol interface {
	// install has srv answer the tasks' methods with h.
	install(srv *mcp.Server, h taskHandler) error
	// created is the tools/call result that hands the client task t, in
	// its form.
	created(t Task, f taskForm) mcp.Result
	// notify tells the client of t's status over conn, which carries the
	// session's messages, in its form.
	notify(ctx context.Context, conn mcp.Connection, t Task, f taskForm) error
}

// jsonrpcTasks is the extension and the core form over the SDK's JSON-RPC
// layer.
type jsonrpcTasks struct{}

var _ taskProtocol = jsonrpcTasks{}

// errTaskNotFound is a task this client may not see: none, or another
// credential's (the task id is not authority: toolgate's answer is).
var errTaskNotFound = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}

// errCoreOnly answers a method of the core form only (tasks/result,
// tasks/list) to a client of the extension.
var errCoreOnly = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found: the tasks extension has no such method (the 2025-11-25 revision's tasks do)"}

func (jsonrpcTasks) install(srv *mcp.Server, h taskHandler) error {
	missing := func() error {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
		return &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability", Data: data}
	}
	check := func(p *taskParams) (taskForm, error) {
		if p == nil {
			p = &taskParams{}
		}
		f := h.form(p.Meta)
		switch {
		case f == formNone:
			return f, missing()
		case p.TaskID == "":
			return f, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "taskId: required (the id a tools/call answered with)"}
		case len(p.TaskID) > maxTaskID:
			return f, errTaskNotFound
		}
		return f, nil
	}
	if err := mcp.AddReceivingCustomMethod(srv, "tasks/get", func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (mcp.Result, error) {
		f, err := check(p)
		if err != nil {
			return nil, err
		}
		t, err := h.getTask(ctx, p.TaskID, p.Meta)
		if err != nil {
			return nil, err
		}
		if f == formCore {
			return &coreTaskResult{coreTask: coreOf(t)}, nil
		}
		return &taskResult{ResultType: "complete", Task: t}, nil
	}); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(srv, "tasks/cancel", func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (mcp.Result, error) {
		f, err := check(p)
		if err != nil {
			return nil, err
		}
		if f == formCore {
			t, err := h.cancelCoreTask(ctx, p.TaskID)
			if err != nil {
				return nil, err
			}
			return &coreTaskResult{coreTask: coreOf(t)}, nil
		}
		if err := h.cancelTask(ctx, p.TaskID); err != nil {
			return nil, err
		}
		return &emptyTaskResult{ResultType: "complete"}, nil
	}); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(srv, "tasks/result", func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (mcp.Result, error) {
		f, err := check(p)
		if err != nil {
			return nil, err
		}
		if f != formCore {
			return nil, errCoreOnly
		}
		t, err := h.taskResult(ctx, p.TaskID)
		if err != nil {
			return nil, err
		}
		return coreResult(t)
	}); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(srv, "tasks/list", func(ctx context.Context, _ *mcp.ServerSession, p *listTasksParams) (*listTasksResult, error) {
		if p == nil { // params are optional
			p = &listTasksParams{}
		}
		switch h.form(p.Meta) {
		case formNone:
			return nil, missing()
		case formExtension:
			return nil, errCoreOnly
		}
		tasks, next, err := h.listTasks(ctx, p.Cursor)
		if err != nil {
			return nil, err
		}
		r := &listTasksResult{Tasks: make([]coreTask, len(tasks)), NextCursor: next}
		for i, t := range tasks {
			r.Tasks[i] = coreOf(t)
		}
		return r, nil
	}); err != nil {
		return err
	}
	// The one thing a task asks of its client is to open the decision
	// page: an answer to it is noted, any other ignored, as the extension
	// has a server do with responses to nothing outstanding.
	return mcp.AddReceivingCustomMethod(srv, "tasks/update", func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*emptyTaskResult, error) {
		f, err := check(p)
		if err != nil {
			return nil, err
		}
		if f != formExtension {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found: tasks/update is the tasks extension's"}
		}
		if err := h.answered(ctx, p.TaskID, p.InputResponses); err != nil {
			return nil, err
		}
		return &emptyTaskResult{ResultType: "complete"}, nil
	})
}

// maxTaskID bounds a task id a client sends: a toolgate pendingId.
const maxTaskID = 1024

func (jsonrpcTasks) created(t Task, f taskForm) mcp.Result {
	if f == formCore {
		return coreCreated(t)
	}
	r := &taskResult{ResultType: "task", Task: t}
	r.Meta = mcp.Meta{MetaPendingID: t.TaskID}
	return r
}

func (jsonrpcTasks) notify(ctx context.Context, conn mcp.Connection, t Task, f taskForm) error {
	method, params := "notifications/tasks", any(t)
	if f == formCore {
		method, params = "notifications/tasks/status", coreOf(t)
	}
	data, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return conn.Write(ctx, &jsonrpc.Request{Method: method, Params: data})
}

// declaresTasks reports whether a client declared the tasks extension for
// a request: in the request's own capabilities (_meta's
// io.modelcontextprotocol/clientCapabilities, the 2026-07-28 revision's
// per-request declaration) when it carries them, else in those it
// initialized its session with.
func declaresTasks(meta mcp.Meta, initialized *mcp.ClientCapabilities) bool {
	if caps, ok := meta[mcp.MetaKeyClientCapabilities]; ok {
		m, _ := caps.(map[string]any)
		exts, _ := m["extensions"].(map[string]any)
		_, ok := exts[TasksExtension]
		return ok
	}
	if initialized == nil {
		return false
	}
	_, ok := initialized.Extensions[TasksExtension]
	return ok
}

// connTransport is a transport whose connection the session keeps, to
// send what the SDK has no call for (the tasks' notifications), and whose
// tools/call requests keep the task they ask for (liftingConn).
type connTransport struct {
	mcp.Transport
	mu   sync.Mutex
	conn mcp.Connection
}

func (t *connTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err == nil {
		c = liftingConn{c}
		t.mu.Lock()
		t.conn = c
		t.mu.Unlock()
	}
	return c, err
}

// connection is the connection, once connected.
func (t *connTransport) connection() mcp.Connection {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn
}

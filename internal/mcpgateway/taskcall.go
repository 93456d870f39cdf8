package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// A tools/call of a client that declares the tasks extension, and that
// waits on a human, is answered at once with a task: its id is the
// toolgate call's pendingId, and the task lives in toolgate, as the
// entry. So any gateway holding the same credential -- this process, one
// restarted, another replica -- answers tasks/get for it, and toolgate
// answers it for no other: an agent's credential reads only its own calls.
// Once the call is approved, the gateway that next looks at it (the one
// that created the task, while its session lasts, or the one a tasks/get
// reaches) claims it, as the held path does, and runs it: the claim is a
// compare-and-set, so the call runs once, on one gateway.

// taskCancelReason is why a call is withdrawn by tasks/cancel.
const taskCancelReason = "cancelled by the MCP client"

// DefaultPollInterval is the pollIntervalMs a task suggests.
const DefaultPollInterval = 2 * time.Second

// runAllowance is what a task's ttlMs gives a call past its approval
// deadline to run: the hour a claim holds it.
const runAllowance = time.Hour

// callAsTask submits the call and, when it waits on a human, answers with
// its task; a call toolgate decides at once goes the held way (the
// submit is the same call, answered with the entry it created). A second
// identical call (the same tool, team and arguments, under the gateway's
// credential) while one waits gets that one's task.
func (s *session) callAsTask(ctx context.Context, req *mcp.CallToolRequest, u *upstream, tool string, call machine.Call) (mcp.Result, error) {
	gw := s.gw
	e, err := s.submitOnce(ctx, call)
	if err != nil || e.Status != machine.StatePendingApproval {
		return s.callHeld(ctx, req, u, tool, call)
	}
	s.watch(e.PendingID)
	gw.log.Info("tools/call answered with a task", "tool", call.ToolName, "pendingId", e.PendingID)
	return gw.tasks.created(gw.taskOf(ctx, e, false), formExtension), nil
}

// submitOnce submits call, unless an identical call of the credential
// waits (pendingTwin): then that one is the answer. Two identical calls at
// once are looked for and submitted one after the other.
func (s *session) submitOnce(ctx context.Context, call machine.Call) (*machine.Entry, error) {
	unlock := s.gw.creating.lock(call.Team + " " + call.ToolName + " " + machine.ArgumentsDigest(call.Arguments))
	defer unlock()
	if e := s.pendingTwin(ctx, call); e != nil {
		return e, nil
	}
	return s.gw.gate.Submit(ctx, call)
}

// pendingTwin is the call of the gateway's credential that waits for a
// decision and is the same as call (tool, team, arguments as submitted),
// or nil.
func (s *session) pendingTwin(ctx context.Context, call machine.Call) *machine.Entry {
	pending, err := s.gw.gate.List(ctx, wire.ListRequest{ToolName: call.ToolName, Status: machine.StatePendingApproval})
	if err != nil {
		s.gw.log.Warn("tools/call: could not look for the same call waiting; submitting this one", "tool", call.ToolName, "err", err)
		return nil
	}
	digest := machine.ArgumentsDigest(call.Arguments)
	for _, e := range pending {
		args := e.OriginalArguments
		if len(args) == 0 {
			args = e.ToolArguments
		}
		if e.Team == call.Team && s.gw.ours(e) && machine.ArgumentsDigest(args) == digest {
			return e
		}
	}
	return nil
}

// ours reports whether e is a call a gateway submitted for one of this
// gateway's servers.
func (gw *Gateway) ours(e *machine.Entry) bool {
	if !strings.HasPrefix(e.ToolCallID, callIDPrefix) {
		return false
	}
	for _, name := range gw.servers {
		if strings.HasPrefix(e.ToolName, "mcp"+Separator+name+Separator) {
			return true
		}
	}
	return false
}

// callIDPrefix starts the toolCallId of every call the gateway submits.
const callIDPrefix = "mcp_"

// getTask is the task id as it stands. A call approved and not yet
// claimed is claimed, and run, here; a call still waiting is watched, so
// that this session runs it once approved and tells its client.
//
// A client on 2026-07-28 that opens URLs (its request declares
// elicitation.url) is offered the call's page in the inbox (with
// --inbox-url) while the call waits, as the task's one input request
// (input_required), until it answers it with tasks/update; then the task
// is working again until the call is decided. The page signs its user in
// and lets decide only whom the policy names.
func (s *session) getTask(ctx context.Context, id string, meta mcp.Meta) (Task, error) {
	e, err := s.entryOf(ctx, id)
	if err != nil {
		return Task{}, err
	}
	return s.gw.taskOf(ctx, s.follow(ctx, e), declaresURLElicitation(meta)), nil
}

// follow has the session take the call e of a task forward: claimed and
// run here when it may run (the claimed entry is returned), watched while
// it waits for a decision or its time.
func (s *session) follow(ctx context.Context, e *machine.Entry) *machine.Entry {
	switch {
	case e.Runnable(time.Now()):
		if claimed := s.advance(ctx, e); claimed != nil {
			return claimed
		}
	case e.Status == machine.StatePendingApproval || e.Status == machine.StateScheduled:
		s.watch(e.PendingID)
	}
	return e
}

// answered notes the client's answer to the task's offer of its decision
// page, if responses hold one: the offer is not made again.
func (s *session) answered(ctx context.Context, id string, responses json.RawMessage) error {
	if _, err := s.entryOf(ctx, id); err != nil {
		return err
	}
	var r map[string]json.RawMessage
	if json.Unmarshal(responses, &r) == nil {
		if _, ok := r[decisionKey]; ok {
			s.gw.offered.add(id)
		}
	}
	return nil
}

// entryOf is the call of task id, when this client may see it.
func (s *session) entryOf(ctx context.Context, id string) (*machine.Entry, error) {
	e, err := s.gw.gate.Get(ctx, id)
	switch {
	case errors.Is(err, machine.ErrNotFound), errors.Is(err, machine.ErrInvalid):
		s.gw.log.Info("tasks: no such task", "taskId", id, "err", err)
		return nil, errTaskNotFound
	case err != nil:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolgate could not be asked about task " + id + ": " + err.Error()}
	case !s.gw.ours(e):
		s.gw.log.Info("tasks: not a task of this gateway's", "taskId", id, "tool", e.ToolName)
		return nil, errTaskNotFound
	}
	return e, nil
}

// cancelTask withdraws the call of task id, when it has not started
// (waiting for a decision, or approved and not yet claimed): toolgate
// records it CANCELLED_BY_SYSTEM, "cancelled by the MCP client", and its
// server never hears of it. A call running or ended is left as it is:
// the cancel is acknowledged, as the extension asks, and tasks/get says
// what became of it.
func (s *session) cancelTask(ctx context.Context, id string) error {
	e, err := s.entryOf(ctx, id)
	if err != nil {
		return err
	}
	if !e.Status.Terminal() && e.Status != machine.StateExecuting {
		_, err := s.gw.gate.Cancel(ctx, id, "", taskCancelReason)
		switch {
		case err == nil:
			s.gw.log.Info("tasks/cancel: withdrawn", "pendingId", id)
		case errors.Is(err, machine.ErrConflict):
			// Claimed or ended between the read and the cancel: it stands.
		default:
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolgate could not withdraw task " + id + ": " + err.Error()}
		}
	}
	go s.notifyTask(id)
	return nil
}

// watch follows the call of task id while the session lasts: once it is
// approved, the session claims and runs it; when it ends, here or where
// another claimed it, the client is told. One watch per call and session.
func (s *session) watch(id string) {
	s.mu.Lock()
	if s.closed || s.watching[id] {
		s.mu.Unlock()
		return
	}
	s.watching[id] = true
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.watching, id)
			s.mu.Unlock()
		}()
		for {
			o, err := s.gw.gate.Await(s.life, id)
			if s.life.Err() != nil {
				return
			}
			if err != nil || !o.Runnable() || o.Entry == nil {
				s.notifyTask(id)
				return
			}
			if s.advance(s.life, o.Entry) != nil {
				return // the run tells the client
			}
			// Claimed elsewhere (Await then waits for its end), or the
			// claim failed: look again in a while.
			select {
			case <-s.life.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// advance claims the runnable call e and runs it in the background,
// returning the claimed entry; nil when another claimed it first (or the
// claim failed: the next look tries again).
func (s *session) advance(ctx context.Context, e *machine.Entry) *machine.Entry {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	claimed, err := s.gw.gate.Started(cctx, e.PendingID, "")
	if err != nil {
		if !errors.Is(err, machine.ErrConflict) {
			s.gw.log.Warn("tasks: claiming an approved call failed; the next look tries again", "pendingId", e.PendingID, "err", err)
		}
		return nil
	}
	go s.runTask(claimed)
	return claimed
}

// runTask runs the claimed call of a task on its server and records how
// it went, as the held path does, then tells the client.
func (s *session) runTask(e *machine.Entry) {
	defer s.notifyTask(e.PendingID)
	ctx := s.life
	u, tool, err := s.upstreamOf(ctx, e.ToolName)
	if err != nil {
		why := "it names no tool of this gateway's servers: " + err.Error()
		s.record(ctx, e, nil, why)
		s.gw.outcomes.put(e.PendingID, toolError("toolgate: "+e.PendingID+" was not run: "+why, e.PendingID), nil)
		return
	}
	res, err := s.run(ctx, u, tool, nil, e, time.Time{}) // nobody's request waits on a task
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr):
		s.gw.outcomes.put(e.PendingID, nil, &TaskError{Code: rpcErr.Code, Message: rpcErr.Message})
	case err != nil:
		s.gw.outcomes.put(e.PendingID, nil, &TaskError{Code: jsonrpc.CodeInternalError, Message: err.Error()})
	default:
		out, _ := res.(*mcp.CallToolResult)
		s.gw.outcomes.put(e.PendingID, out, nil)
	}
}

// upstreamOf finds the server and tool of a toolgate tool name.
func (s *session) upstreamOf(ctx context.Context, toolName string) (*upstream, string, error) {
	for _, name := range s.gw.servers {
		rest, ok := strings.CutPrefix(toolName, "mcp"+Separator+name+Separator)
		if !ok {
			continue
		}
		u := s.ups[name]
		if ToolName(name, rest) == toolName {
			return u, rest, nil
		}
		// A name toolgate could not take as it was: find the tool it was
		// made of.
		tools, err := u.listTools(ctx)
		if err != nil {
			return nil, "", err
		}
		for _, t := range tools {
			if ToolName(name, t.Name) == toolName {
				return u, t.Name, nil
			}
		}
	}
	return nil, "", fmt.Errorf("%s", toolName)
}

// notifyTask tells the client how task id stands, on its session's
// connection, in the form of tasks it speaks, when it listens there: a
// client that initialized a session over stdio. Over HTTP, and on
// 2026-07-28 (where a client listens only on the subscriptions it opens,
// which the SDK offers for no task), the client polls.
func (s *session) notifyTask(id string) {
	conn := s.conn.connection()
	f := s.form(nil)
	if conn == nil || !s.initialized || f == formNone || s.life.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.life, 30*time.Second)
	defer cancel()
	e, err := s.entryOf(ctx, id)
	if err != nil {
		return
	}
	if err := s.gw.tasks.notify(ctx, conn, s.gw.taskOf(ctx, e, false), f); err != nil {
		s.gw.log.Warn("notifications/tasks not sent", "taskId", id, "err", err)
	}
}

// taskOf is the call e as a task; offer says the client opens URLs, so
// that a call waiting for a decision offers its page (see getTask).
func (gw *Gateway) taskOf(ctx context.Context, e *machine.Entry, offer bool) Task {
	t := Task{
		TaskID: e.PendingID, CreatedAt: rfc3339(e.RequestedAt), LastUpdatedAt: rfc3339(e.RequestedAt),
		PollIntervalMs: gw.opts.PollInterval.Milliseconds(),
	}
	if e.LastTransition != nil && e.LastTransition.At > 0 {
		t.LastUpdatedAt = rfc3339(e.LastTransition.At)
	}
	if e.ApprovalTimeoutAt > 0 {
		ttl := e.ApprovalTimeoutAt - e.RequestedAt + runAllowance.Milliseconds()
		t.TTLMs = &ttl
	}
	switch e.Status {
	case machine.StatePendingApproval:
		t.Status, t.StatusMessage = TaskWorking, gw.waiting(e)
		if offer && gw.opts.InboxURL != "" && !gw.offered.has(e.PendingID) {
			t.Status = TaskInputRequired
			t.InputRequests = map[string]inputRequest{decisionKey: {Method: "elicitation/create", Params: urlElicitParams{
				Mode: "url", Message: t.StatusMessage, URL: gw.page(e.PendingID)}}}
		}
	case machine.StateScheduled:
		t.Status, t.StatusMessage = TaskWorking, "toolgate: "+e.PendingID+" runs at "+rfc3339(e.ScheduledExecutionTime)
	case machine.StateApproved:
		t.Status, t.StatusMessage = TaskWorking, "toolgate: "+e.PendingID+" was approved"+by(e.ApprovedOrRejectedByUserID)+" and runs next"
	case machine.StateExecuting:
		t.Status, t.StatusMessage = TaskWorking, "toolgate: "+e.PendingID+" is running"
	case machine.StateCompletedSuccess, machine.StateCompletedFailure:
		gw.finished(e, &t)
	case machine.StateCancelled:
		if e.StatusReason == taskCancelReason {
			t.Status, t.StatusMessage = TaskCancelled, "toolgate: "+e.PendingID+" was withdrawn: "+taskCancelReason
			break
		}
		fallthrough
	default:
		// Refused (rejected, timed out, denied, cancelled by someone
		// else): the tool error the held path answers with.
		why := gw.refusal(ctx, e)
		t.Status, t.StatusMessage = TaskCompleted, why
		t.Result = mustJSON(toolError(why, e.PendingID))
	}
	return t
}

// finished fills in t for a call that ran: the server's answer as this
// process had it, or as toolgate recorded it.
func (gw *Gateway) finished(e *machine.Entry, t *Task) {
	t.Status = TaskCompleted
	if res, rpcErr, ok := gw.outcomes.get(e.PendingID); ok {
		if rpcErr != nil {
			t.Status, t.StatusMessage, t.Error = TaskFailed, rpcErr.Message, rpcErr
			return
		}
		t.Result = mustJSON(res)
		return
	}
	if e.Status == machine.StateCompletedSuccess && e.RespondedBy != "" {
		t.Result = mustJSON(respondedResult(e))
		return
	}
	if e.Status == machine.StateCompletedSuccess {
		var res mcp.CallToolResult
		if json.Unmarshal(e.Result, &res) == nil && res.Content != nil {
			t.Result = e.Result
			return
		}
		// Recorded as its size, or not at all: too large to keep.
		t.Result = mustJSON(toolError("toolgate: "+e.PendingID+" ran, but its result was too large to keep: "+string(e.Result), e.PendingID))
		return
	}
	if m := serverError.FindStringSubmatch(e.Error); m != nil {
		code, _ := strconv.ParseInt(m[2], 10, 64)
		t.Status, t.StatusMessage, t.Error = TaskFailed, e.Error, &TaskError{Code: code, Message: m[3]}
		return
	}
	if text, ok := strings.CutPrefix(e.Error, toolAnsweredError); ok {
		t.Result = mustJSON(&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}})
		return
	}
	t.Result = mustJSON(toolError("toolgate: "+e.PendingID+": "+e.Error, e.PendingID))
}

// toolAnsweredError starts the error recorded for a tool that answered an
// error result.
const toolAnsweredError = "the tool answered an error: "

// serverError is the error recorded for a server's JSON-RPC error.
var serverError = regexp.MustCompile(`^MCP server (\S+) answered error (-?\d+): (.*)$`)

// waiting says who must decide the call e, by when, and where.
func (gw *Gateway) waiting(e *machine.Entry) string {
	who := "an approver"
	switch {
	case e.Quorum != nil && e.Quorum.Required > 1 && len(e.Quorum.Of) > 0:
		who = fmt.Sprintf("%d of %s", e.Quorum.Required, strings.Join(e.Quorum.Of, ", "))
	case e.Quorum != nil && e.Quorum.Required > 1:
		who = fmt.Sprintf("%d approvers", e.Quorum.Required)
	case len(e.Approvers) == 1:
		who = e.Approvers[0]
	case len(e.Approvers) > 1:
		who = "one of " + strings.Join(e.Approvers, ", ")
	case e.UserIDToApprove != "":
		who = e.UserIDToApprove
	}
	msg := fmt.Sprintf("toolgate: waiting for %s to decide on %s (%s)", who, e.PendingID, e.ToolName)
	if e.ApprovalTimeoutAt > 0 {
		msg += ", by " + rfc3339(e.ApprovalTimeoutAt)
		if e.AutoRejectOnTimeout {
			msg += " (rejected then)"
		}
	}
	if gw.opts.InboxURL != "" {
		msg += "; decide at " + gw.page(e.PendingID)
	}
	return msg
}

// page is the call's page in the inbox.
func (gw *Gateway) page(pendingID string) string {
	return strings.TrimSuffix(gw.opts.InboxURL, "/") + "/#/calls/" + pendingID
}

// refusal says who refused the call e and why, as the held path would.
func (gw *Gateway) refusal(ctx context.Context, e *machine.Entry) string {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := gw.gate.Await(actx, e.PendingID)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		return "toolgate: " + rej.Error()
	}
	return fmt.Sprintf("toolgate: %s was not run: %s %s", e.PendingID, e.Status, e.StatusReason)
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + who
}

func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(toolError("toolgate: the result is not JSON: "+err.Error(), ""))
	}
	return data
}

// outcomes are the answers of the calls this process ran for tasks, as
// their servers gave them (the entry records a failure as text), the
// latest maxOutcomes.
type outcomes struct {
	mu    sync.Mutex
	m     map[string]outcome
	order []string
}

type outcome struct {
	res *mcp.CallToolResult
	err *TaskError
}

const maxOutcomes = 1024

func (o *outcomes) put(id string, res *mcp.CallToolResult, err *TaskError) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]outcome{}
	}
	if _, ok := o.m[id]; !ok {
		o.order = append(o.order, id)
	}
	o.m[id] = outcome{res, err}
	if len(o.order) > maxOutcomes {
		delete(o.m, o.order[0])
		o.order = o.order[1:]
	}
}

func (o *outcomes) get(id string) (*mcp.CallToolResult, *TaskError, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.m[id]
	return v.res, v.err, ok
}

// keyedMutex locks by key: two identical calls at once are looked for and
// submitted one after the other, and calls unlike each other do not wait.
type keyedMutex struct {
	mu   sync.Mutex
	held map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

// lock takes key's lock; the returned func releases it.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.held == nil {
		k.held = map[string]*keyedLock{}
	}
	l := k.held[key]
	if l == nil {
		l = &keyedLock{}
		k.held[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
}

// recentIDs are the latest maxOutcomes ids added.
type recentIDs struct{ o outcomes }

func (r *recentIDs) add(id string) { r.o.put(id, nil, nil) }

func (r *recentIDs) has(id string) bool {
	_, _, ok := r.o.get(id)
	return ok
}

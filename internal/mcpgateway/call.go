package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// callTool gates one tools/call through toolgate. The call is submitted
// (tool mcp__<server>__<tool>, the session's conversation, the gateway's
// credential as its caller) and waited for. When toolgate lets it run, the
// gateway claims it (toolgate.started, as the Claude Code hooks settle the
// calls Claude Code runs), sends the server the arguments of the entry it
// claimed -- an approver's edit, if there was one -- and records how it
// went (toolgate.succeeded or toolgate.failed), so the entry ends
// COMPLETED_SUCCESS or COMPLETED_FAILURE. A refusal (rejected, timed out,
// cancelled, denied by policy) is answered as a tool error naming who
// refused and why, and the server never hears of the call.
func (s *session) callTool(reqCtx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	p := req.Params
	server, tool, ok := s.gw.route(p.Name)
	if !ok {
		return nil, unknownTool(p.Name)
	}
	u := s.ups[server]
	known, err := u.hasTool(reqCtx, tool)
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, unknownTool(p.Name)
	}
	args := json.RawMessage(bytes.TrimSpace(p.Arguments))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: arguments must be a JSON object"}
	}

	call := machine.Call{
		ToolCallID: callIDPrefix + randomHex(12), ToolName: ToolName(server, tool), Arguments: args,
		ConversationID: s.conversation, Team: s.gw.opts.Team,
	}
	switch {
	case s.form(p.Meta) == formExtension:
		return s.callAsTask(reqCtx, req, u, tool, call)
	case s.asksForTask(p.Meta):
		return s.callAsCoreTask(reqCtx, call)
	}
	return s.callHeld(reqCtx, req, u, tool, call)
}

// callHeld gates a call holding the client's request open until toolgate
// decides it, within the wait, and runs it when it may.
func (s *session) callHeld(reqCtx context.Context, req *mcp.CallToolRequest, u *upstream, tool string, call machine.Call) (mcp.Result, error) {
	p := req.Params
	// The call stops when the client cancels it or disconnects, or when
	// its session ends.
	// The client gives up at its timeout: the call is answered before,
	// whatever its server does (see run).
	deadline := time.Now().Add(s.gw.answerWithin())
	ctx, cancel := context.WithCancelCause(reqCtx)
	defer cancel(nil)
	defer s.track(cancel)()
	if hctx := s.gw.requestContext(req); hctx != nil {
		// Over HTTP the SDK goes on with a request whose client is gone:
		// its connection dropping stops the call, as on stdio.
		defer context.AfterFunc(hctx, func() { cancel(errClientDisconnected) })()
	}

	v := s.decide(ctx, call, p.GetProgressToken())
	switch {
	case v.answer != nil:
		return v.answer, nil
	case v.entry == nil && v.interrupt:
		s.gw.log.Info("tools/call refused, the turn to stop", "tool", call.ToolName, "pendingId", v.pendingID, "why", v.refusal)
		return interruptError(v.refusal, v.pendingID), nil
	case v.entry == nil:
		s.gw.log.Info("tools/call refused", "tool", call.ToolName, "pendingId", v.pendingID, "why", v.refusal)
		return toolError(v.refusal, v.pendingID), nil
	}
	return s.run(ctx, u, tool, p.Meta, v.entry, deadline)
}

// answerWithin is how long after its request a held call is answered at
// the latest: before the client gives up (Options.Timeout), keeping half
// the wait's margin to record the outcome and answer.
func (gw *Gateway) answerWithin() time.Duration {
	return gw.opts.Timeout - client.WaitMargin(gw.opts.Timeout)/2
}

func unknownTool(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

// toolError is a tool result that says the call did not run, or failed,
// and why. Its _meta names the toolgate call.
func toolError(text, pendingID string) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if pendingID != "" {
		res.Meta = mcp.Meta{MetaPendingID: pendingID}
	}
	return res
}

// MetaPendingID is the _meta key of a refused call's result that holds its
// toolgate pendingId.
const MetaPendingID = "dev.toolgate/pendingId"

// verdict is what toolgate said of a call: the entry the gateway claimed
// to run, or why it will not run.
type verdict struct {
	entry     *machine.Entry
	refusal   string
	pendingID string
	// interrupt marks a refusal that asks the agent to stop its turn;
	// answer, the result of a call an approver answered with its result.
	interrupt bool
	answer    *mcp.CallToolResult
}

func refused(pendingID, why string) verdict { return verdict{refusal: why, pendingID: pendingID} }

// decide submits the call and waits for its verdict, within the wait
// (client.SubmitAndWaitWith says what ends the wait, and how a call is
// withdrawn), telling the client when the call waits for a human. A call
// toolgate lets run is claimed to run here; any other verdict is a
// refusal, saying why: rejected, denied by policy, timed out at its
// approval deadline, withdrawn when nobody decided within the wait or the
// client stopped waiting (it cancelled the request or disconnected), or
// toolgate could not be asked.
func (s *session) decide(ctx context.Context, call machine.Call, progressToken any) verdict {
	opts := client.WaitOptions{
		Wait: s.gw.wait, Timeout: s.gw.opts.Timeout, Stopped: stopped,
		OnPending: func(e *machine.Entry) {
			s.progress(ctx, progressToken, "toolgate: waiting for a decision on "+e.PendingID)
		},
	}
	return s.verdict(ctx, call.ToolName, client.SubmitAndWaitWith(ctx, s.gw.gate, call, opts), opts)
}

// verdict puts v in the gateway's words: a call toolgate lets run is
// claimed; any other is refused, saying why. A call toolgate could not be
// asked about once submitted is withdrawn.
func (s *session) verdict(ctx context.Context, toolName string, v client.Verdict, opts client.WaitOptions) verdict {
	switch v.Kind {
	case client.VerdictRun:
		return s.claim(ctx, toolName, v.Outcome, opts)
	case client.VerdictRefused:
		r := refused(v.PendingID, "toolgate: "+v.Err.Error())
		r.interrupt = interrupted(v.Err)
		return r
	case client.VerdictRanElsewhere:
		if v.Err == nil && v.Outcome.RespondedBy != "" && v.Outcome.Entry != nil {
			return verdict{pendingID: v.PendingID, answer: respondedResult(v.Outcome.Entry)}
		}
		if v.Err != nil {
			return refused(v.PendingID, "toolgate: "+v.Err.Error()+" (it ran elsewhere, not through this gateway)")
		}
		return refused(v.PendingID, fmt.Sprintf("toolgate: %s ran elsewhere (%s), not through this gateway", v.PendingID, v.Outcome.Kind))
	case client.VerdictExpired:
		return refused(v.PendingID, fmt.Sprintf("toolgate: tool call %s (%s) timed out: nobody decided within its approval timeout (%s), and its policy rejects it then", v.PendingID, v.Entry.ToolName, v.ApprovalTimeout))
	case client.VerdictTimedOut, client.VerdictWithdrawn:
		if v.Err != nil {
			return refused(v.PendingID, fmt.Sprintf("toolgate: %s was not run: %s, and withdrawing it failed: %v", v.PendingID, v.Why, v.Err))
		}
		return refused(v.PendingID, "toolgate: "+v.PendingID+" was not run: withdrawn: "+v.Why)
	}
	switch {
	case v.PendingID == "" && errors.Is(v.Err, client.ErrUnavailable):
		// Nothing answered the submit: no call was recorded.
		return refused("", fmt.Sprintf("toolgate: %s was not run: %v", toolName, v.Err))
	case v.PendingID == "":
		return refused("", fmt.Sprintf("toolgate: %s was not run: toolgate could not be asked about it: %v", toolName, v.Err))
	case v.Why != "":
		// Toolgate could not be asked while the call was withdrawn.
		return refused(v.PendingID, fmt.Sprintf("toolgate: %s was not run: %s, and withdrawing it failed: %v", v.PendingID, v.Why, v.Err))
	default:
		return s.withdraw(ctx, toolName, v.PendingID, "toolgate could not be asked: "+v.Err.Error(), opts)
	}
}

// claim takes a call toolgate let run, for the gateway to run it: the
// claim (a compare-and-set to EXECUTING, under the gateway's identity)
// also fixes the arguments, which no decision changes after it.
func (s *session) claim(ctx context.Context, toolName string, o client.Outcome, opts client.WaitOptions) verdict {
	if ctx.Err() != nil {
		// Approved, and nobody waits for it any more.
		return s.withdraw(ctx, toolName, o.PendingID, stopped(ctx), opts)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), client.WaitMargin(s.gw.opts.Timeout)/2)
	defer cancel()
	e, err := s.gw.gate.Started(cctx, o.PendingID, "")
	switch {
	case err == nil:
		return verdict{entry: e, pendingID: e.PendingID}
	case errors.Is(err, machine.ErrConflict):
		// Cancelled (or taken) between the approval and the claim: say
		// what it is now.
		_, aerr := s.gw.gate.Await(cctx, o.PendingID)
		var rej *client.RejectedError
		if errors.As(aerr, &rej) {
			return refused(o.PendingID, "toolgate: "+rej.Error())
		}
		return refused(o.PendingID, fmt.Sprintf("toolgate: %s was not run: it could not be claimed: %v", o.PendingID, err))
	default:
		return s.withdraw(ctx, toolName, o.PendingID, "it could not be claimed to run: "+err.Error(), opts)
	}
}

// withdraw withdraws the call pendingID, saying why, and refuses it; a
// decision that landed first stands.
func (s *session) withdraw(ctx context.Context, toolName, pendingID, why string, opts client.WaitOptions) verdict {
	return s.verdict(ctx, toolName, client.WithdrawWith(ctx, s.gw.gate, pendingID, why, opts), opts)
}

// stopped says why ctx ended: the client stopped waiting.
func stopped(ctx context.Context) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, io.EOF):
		return "the MCP client disconnected"
	case errors.Is(cause, context.Canceled):
		return "the MCP client cancelled the request"
	default:
		return cause.Error()
	}
}

// progress tells the client how its call stands, when it asked to hear.
func (s *session) progress(ctx context.Context, token any, message string) {
	if token == nil {
		return
	}
	ctx, ss, done := s.related(ctx, "", token)
	defer done()
	if ss != nil {
		_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Message: message})
	}
}

// run sends the claimed call to its server with the entry's arguments and
// records the outcome. The server's answer goes back as it is: a result
// (an error result is recorded as a failure), or its JSON-RPC error. A
// server that fails mid-call (its process died, its connection broke), or
// that has not answered by deadline (when not zero: the client's request
// waits), is recorded as a failure and answered as a tool error; the
// server is told the call is cancelled.
func (s *session) run(ctx context.Context, u *upstream, tool string, meta mcp.Meta, e *machine.Entry, deadline time.Time) (mcp.Result, error) {
	defer s.keepClaim(e.PendingID)()
	if ctx.Err() != nil {
		why := stopped(ctx) + " before the call was sent to MCP server " + u.name
		s.record(ctx, e, nil, why)
		return toolError("toolgate: "+e.PendingID+": "+why, e.PendingID), nil
	}
	if e.ArgumentsDigest != "" && machine.ArgumentsDigest(e.ToolArguments) != e.ArgumentsDigest {
		// The approval binds to the digest the entry records: arguments
		// that do not match it are not the ones approved, and never run.
		why := "its arguments do not match the digest its approval bound them to"
		s.record(ctx, e, nil, why)
		return toolError("toolgate: "+e.PendingID+": "+why, e.PendingID), nil
	}
	if why := s.recheck(ctx, e); why != "" {
		s.record(ctx, e, nil, why)
		return toolError("toolgate: "+e.PendingID+": "+why, e.PendingID), nil
	}
	var res *mcp.CallToolResult
	defer s.relate(ctx, nil, u.name, nil)()
	callCtx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	cs, err := u.session(callCtx)
	if err == nil {
		res, err = cs.CallTool(callCtx, &mcp.CallToolParams{Meta: upstreamMeta(meta), Name: tool, Arguments: e.ToolArguments})
	}
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil && !res.IsError:
		s.record(ctx, e, res, "")
		return res, nil
	case err == nil:
		s.record(ctx, e, nil, toolAnsweredError+resultText(res))
		return res, nil
	case ctx.Err() == nil && callCtx.Err() != nil:
		why := fmt.Sprintf("MCP server %s did not answer by the call's deadline, %s after the client asked (its timeout, %s, less the time to answer it)",
			u.name, s.gw.answerWithin(), s.gw.opts.Timeout)
		s.record(ctx, e, nil, why)
		return toolError("toolgate: "+e.PendingID+": "+why, e.PendingID), nil
	case ctx.Err() != nil:
		why := stopped(ctx) + " while MCP server " + u.name + " ran the call"
		s.record(ctx, e, nil, why)
		return toolError("toolgate: "+e.PendingID+": "+why, e.PendingID), nil
	case errors.As(err, &rpcErr):
		s.record(ctx, e, nil, fmt.Sprintf("MCP server %s answered error %d: %s", u.name, rpcErr.Code, rpcErr.Message))
		return nil, rpcErr
	default:
		why := fmt.Sprintf("MCP server %s failed during the call: %v", u.name, err)
		s.record(ctx, e, nil, why)
		return toolError("toolgate: "+e.PendingID+": "+why, e.PendingID), nil
	}
}

// recheck evaluates a call a human approved again through the policy in
// force, before its server hears of it: "" when it may run, else why it
// does not. A call the policy now denies (a deny rule added since the
// approval) does not run, nor one toolgate cannot say of: the gate does
// not open when it cannot decide.
func (s *session) recheck(ctx context.Context, e *machine.Entry) string {
	if e.ApprovedOrRejectedByUserID == "" {
		return "" // the policy let it run when it was submitted, moments ago
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r, err := s.gw.gate.Recheck(rctx, e.PendingID)
	switch {
	case err != nil:
		return "not run: the policy in force could not be asked about it again before it ran: " + err.Error()
	case r.Denied != "":
		return fmt.Sprintf("not run: approved by %s, but the policy in force (revision %d) now denies it: %s", e.ApprovedOrRejectedByUserID, r.PolicyRevision, r.Denied)
	}
	return ""
}

// maxRecorded bounds the result recorded on the entry, which lives in a
// KV value: a larger one is recorded as its size.
const maxRecorded = 256 << 10

// record reports the outcome of a call the gateway claimed: succeeded with
// res, or failed saying why. It tries for a while: the entry would
// otherwise stay EXECUTING until its claim (an hour) runs out.
func (s *session) record(ctx context.Context, e *machine.Entry, res *mcp.CallToolResult, failure string) {
	g := s.gw.gate
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var result json.RawMessage
	if res != nil {
		data, err := json.Marshal(res)
		switch {
		case err != nil:
			result = json.RawMessage(`{"unrecorded":"the result is not JSON"}`)
		case len(data) > maxRecorded:
			result = json.RawMessage(fmt.Sprintf(`{"unrecorded":"too large","bytes":%d}`, len(data)))
		default:
			result = data
		}
	}
	for attempt := 1; ; attempt++ {
		var err error
		if res != nil {
			_, err = g.Succeed(rctx, e.PendingID, "", result, 0)
		} else {
			_, err = g.Fail(rctx, e.PendingID, "", failure, 0)
		}
		if err == nil {
			return
		}
		if errors.Is(err, machine.ErrConflict) || errors.Is(err, machine.ErrForbidden) || errors.Is(err, machine.ErrInvalid) || rctx.Err() != nil {
			s.gw.log.Error("recording a call's outcome failed", "pendingId", e.PendingID, "attempts", attempt, "err", err)
			return
		}
		select {
		case <-rctx.Done():
		case <-time.After(min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// claimHeartbeat is how often the claim of a call still running upstream
// is renewed; Started holds it an hour.
const claimHeartbeat = 30 * time.Minute

// keepClaim renews the claim on a call while its server runs it; the
// returned func stops.
func (s *session) keepClaim(pendingID string) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(claimHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				hctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if _, err := s.gw.gate.Heartbeat(hctx, pendingID, "", time.Hour); err != nil {
					s.gw.log.Warn("renewing a running call's claim failed", "pendingId", pendingID, "err", err)
				}
				cancel()
			}
		}
	}()
	return func() { close(done) }
}

// resultText is the text of an error result, bounded.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	text := strings.Join(parts, "\n")
	if text == "" {
		text = "(no text)"
	}
	if len(text) > 4096 {
		text = text[:4096] + "…"
	}
	return text
}

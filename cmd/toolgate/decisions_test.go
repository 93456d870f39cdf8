package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
)

// The decisions beside approve and reject, each through the CLI, the
// HTTP API and Claude Code's hook (its HTTP form), against one toolgate.

// hookCall posts a Claude Code hook input for Bash command to toolgate's
// HTTP hook, in the background, as Claude Code on a laptop would: it
// answers once toolgate has decided. The call is session's, its id
// toolUseID.
func hookCall(t *testing.T, base, hook, event, session, toolUseID, command string) <-chan []byte {
	t.Helper()
	body := fmt.Sprintf(`{"session_id":%q,"hook_event_name":%q,"tool_name":"Bash","tool_input":{"command":%q},"tool_use_id":%q}`,
		session, event, command, toolUseID)
	out := make(chan []byte, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/integrations/claude-code/"+hook, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Toolgate-User", "claude-on-laptop")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		out <- data
	}()
	return out
}

// hookReply is what a hookCall answered, within a while.
func hookReply(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	select {
	case data := <-ch:
		return data
	case <-time.After(20 * time.Second):
		t.Fatal("the hook did not answer")
		return nil
	}
}

// httpDo sends a JSON request to toolgate's HTTP API as an admin (an
// open API names its caller by X-Toolgate-User) and decodes its answer.
func httpDo(t *testing.T, method, url, user string, body any) (int, map[string]any) {
	t.Helper()
	var in io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		in = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, in)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Toolgate-User", user)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// waitStatus waits until the call pendingID is in state, and returns it.
func waitStatus(t *testing.T, cl *client.Client, pendingID string, state machine.State) *machine.Entry {
	t.Helper()
	var got *machine.Entry
	bustest.Eventually(t, 15*time.Second, 10*time.Millisecond, "call "+pendingID+" "+string(state), func() (bool, any) {
		e, err := cl.Get(t.Context(), pendingID)
		if err != nil {
			return false, err
		}
		got = e
		return e.Status == state, e.Status
	})
	return got
}

func TestDecisions_RespondThroughTheCLIHTTPAndHook(t *testing.T) {
	t.Parallel()
	nats, base := startWithHTTP(t, `
default:
  requiresApprovalTools: all
  respondable: ["Bash(date*)", web_search]
`)
	ctx := t.Context()
	cl := agent(t, nats)

	// The hook: an approver answers the call with the CLI; Claude Code is
	// told not to run the tool, and handed the result as the approver's.
	perm := hookCall(t, base, "permission-request", "PermissionRequest", "s-respond", "r1", "date -u")
	id := machine.PendingID("s-respond", "r1")
	e := waitStatus(t, cl, id, machine.StatePendingApproval)
	assert.True(t, e.Respondable)
	r := cli(t, nats, "respond", id, "--result", "not json", as(t, nats, "alice"))
	assert.Equal(t, exitUsage, r.code, "a result that is not JSON is refused before anything is sent")
	assert.Contains(t, r.stderr, "--result: not valid JSON")
	r = cli(t, nats, "respond", id, "--result", `{"stdout":"Fri Nov 27 12:00:00 UTC 2026"}`, "--reason", "the clock is frozen in CI", as(t, nats, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "answered "+id+" (Bash) as alice with the result you gave: the tool does not run")
	var out claudecode.PermissionRequestOutput
	data := hookReply(t, perm)
	require.NoError(t, json.Unmarshal(data, &out), string(data))
	d := out.HookSpecificOutput.Decision
	assert.Equal(t, claudecode.Deny, d.Behavior, "Claude Code must not run the tool itself")
	assert.Contains(t, d.Message, `answered by alice instead of running; the tool's result is: {"stdout":"Fri Nov 27 12:00:00 UTC 2026"}`)
	assert.Contains(t, d.Message, "approver alice supplied its result")
	assert.False(t, d.Interrupt)
	e, err := cl.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, e.Status)
	assert.Equal(t, "alice", e.RespondedBy)
	assert.Equal(t, machine.DecidedByHuman, e.DecidedBy)
	assert.Equal(t, 0, e.ExecutionAttempts, "no executor saw it")
	r = cli(t, nats, "receipt", id, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"event": "respond"`)

	// The HTTP API: a decision body with a result answers the call; the
	// agent's Await has it as the call's result, and who supplied it.
	search, err := cl.Submit(ctx, machine.Call{ToolCallID: "w1", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"nats"}`), CallerBotID: "bot-1", ConversationID: "c-respond"})
	require.NoError(t, err)
	awaited := awaitInBackground(cl, ctx, search.PendingID)
	status, body := httpDo(t, "POST", base+"/v1/tool-calls/"+search.PendingID+"/decision", "bob", map[string]any{"result": map[string]any{"hits": 3}})
	require.Equal(t, 200, status, body)
	assert.Equal(t, "COMPLETED_SUCCESS", body["status"])
	assert.Equal(t, "bob", body["respondedBy"])
	a := receiveAwait(t, awaited)
	require.NoError(t, a.err)
	assert.Equal(t, client.Executed, a.out.Kind)
	assert.JSONEq(t, `{"hits":3}`, string(a.out.Result))
	assert.Equal(t, "bob", a.out.RespondedBy)

	// A call of a tool the policy does not list respondable is refused,
	// and stays pending for a decision.
	other, err := cl.Submit(ctx, machine.Call{ToolCallID: "d1", ToolName: "deploy", Arguments: json.RawMessage(`{}`), CallerBotID: "bot-1", ConversationID: "c-respond"})
	require.NoError(t, err)
	status, body = httpDo(t, "POST", base+"/v1/tool-calls/"+other.PendingID+"/decision", "bob", map[string]any{"result": "done"})
	assert.Equal(t, 403, status, body)
	assert.Contains(t, fmt.Sprint(body), "is not respondable")
	r = cli(t, nats, "respond", other.PendingID, "--result", `"done"`, as(t, nats, "alice"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "not respondable")
	e, err = cl.Get(ctx, other.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status)
}

func TestDecisions_RejectAndStopThroughTheCLIHTTPAndHook(t *testing.T) {
	t.Parallel()
	nats, base := startWithHTTP(t, "default: {requiresApprovalTools: all}\n")
	ctx := t.Context()
	cl := agent(t, nats)

	// PermissionRequest, rejected with the CLI's --interrupt: the answer
	// stops the turn.
	perm := hookCall(t, base, "permission-request", "PermissionRequest", "s-stop", "p1", "git push --force")
	id := machine.PendingID("s-stop", "p1")
	waitStatus(t, cl, id, machine.StatePendingApproval)
	r := cli(t, nats, "reject", "--match", "Bash", "--reason", "x", "--interrupt", as(t, nats, "alice"))
	assert.Equal(t, exitUsage, r.code, "--interrupt stops one agent's turn: not with --match")
	r = cli(t, nats, "reject", id, "--reason", "stop: we are mid-release", "--interrupt", as(t, nats, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "the agent is asked to stop its turn")
	var out claudecode.PermissionRequestOutput
	data := hookReply(t, perm)
	require.NoError(t, json.Unmarshal(data, &out), string(data))
	assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.Decision.Behavior)
	assert.True(t, out.HookSpecificOutput.Decision.Interrupt, string(data))
	assert.Contains(t, out.HookSpecificOutput.Decision.Message, "stop: we are mid-release")
	e, err := cl.Get(ctx, id)
	require.NoError(t, err)
	assert.True(t, e.Interrupt)
	assert.True(t, e.LastTransition.Interrupt)

	// PreToolUse, rejected over the HTTP API with interrupt: continue
	// false stops the turn.
	pre := hookCall(t, base, "pre-tool-use", "PreToolUse", "s-stop", "p2", "terraform apply")
	id2 := machine.PendingID("s-stop", "p2")
	waitStatus(t, cl, id2, machine.StatePendingApproval)
	status, body := httpDo(t, "POST", base+"/v1/tool-calls/"+id2+"/decision", "bob", map[string]any{"approved": true, "interrupt": true})
	assert.Equal(t, 400, status, "only a rejection interrupts: %v", body)
	status, body = httpDo(t, "POST", base+"/v1/tool-calls/"+id2+"/decision", "bob", map[string]any{"approved": false, "reason": "not today", "interrupt": true})
	require.Equal(t, 200, status, body)
	assert.Equal(t, true, body["interrupt"])
	var preOut claudecode.PreToolUseOutput
	data = hookReply(t, pre)
	require.NoError(t, json.Unmarshal(data, &preOut), string(data))
	assert.Equal(t, claudecode.Deny, preOut.HookSpecificOutput.PermissionDecision)
	require.NotNil(t, preOut.Continue, string(data))
	assert.False(t, *preOut.Continue)
	assert.Contains(t, preOut.StopReason, "not today")

	// The Go client: the agent's Await is a rejection that interrupts;
	// a plain rejection is not.
	stop, err := cl.Submit(ctx, bashCall("c-stop", "g1", "make release"))
	require.NoError(t, err)
	awaited := awaitInBackground(cl, ctx, stop.PendingID)
	r = cli(t, nats, "reject", stop.PendingID, "--reason", "hand back to me", "--interrupt", as(t, nats, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	a := receiveAwait(t, awaited)
	assert.ErrorIs(t, a.err, client.ErrInterrupted)
	assert.ErrorIs(t, a.err, client.ErrRejected)
	assert.Contains(t, a.err.Error(), "stop this turn")
	plain, err := cl.Submit(ctx, bashCall("c-stop", "g2", "make release"))
	require.NoError(t, err)
	awaited = awaitInBackground(cl, ctx, plain.PendingID)
	r = cli(t, nats, "reject", plain.PendingID, "--reason", "no", as(t, nats, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	a = receiveAwait(t, awaited)
	assert.ErrorIs(t, a.err, client.ErrRejected)
	assert.False(t, errors.Is(a.err, client.ErrInterrupted))
}

func TestDecisions_TimeoutOutcomesThroughTheCLIHTTPAndHook(t *testing.T) {
	t.Parallel()
	// The timer decides each call nobody answered within 1.5 s, as its
	// onTimeout says: an approval only where nothing holds the call for
	// humans.
	nats, base := startWithHTTP(t, `
default:
  requiresApprovalTools: all
  approvalTimeoutMs: 1500
  autoRejectOnTimeout: false
  onTimeout:
    "Bash(git status*)": approve
    "Bash(make *)": cancel
    deploy: reject
  risk:
    "Bash(git status --porcelain*)": high
`)
	ctx := context.WithoutCancel(t.Context())
	cl := agent(t, nats)

	// Each surface's call is submitted first, then all wait out the one
	// deadline together.
	approved := hookCall(t, base, "pre-tool-use", "PreToolUse", "s-late", "a1", "git status")
	held := hookCall(t, base, "permission-request", "PermissionRequest", "s-late", "a2", "git status --porcelain")
	status, body := httpDo(t, "POST", base+"/v1/tool-calls", "bot-1",
		map[string]any{"toolName": "Bash", "toolArguments": map[string]any{"command": "make clean"}, "conversationId": "c-late", "toolCallId": "m1", "callerBotId": "bot-1"})
	require.Equal(t, 201, status, body)
	cancelled := body["pendingId"].(string)
	cliDone := make(chan cliResult, 1)
	go func() {
		cliDone <- cliCtx(ctx, nats, "submit", "--tool", "deploy", "--args", `{"env":"prod"}`, "--conversation", "c-late", "--caller", "bot-1", "--id", "d1", "--wait")
	}()

	// The hook's git status: approved by the timer, so Claude Code runs it.
	var pre claudecode.PreToolUseOutput
	data := hookReply(t, approved)
	require.NoError(t, json.Unmarshal(data, &pre), string(data))
	assert.Equal(t, claudecode.Allow, pre.HookSpecificOutput.PermissionDecision, string(data))
	e, err := cl.Get(ctx, machine.PendingID("s-late", "a1"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, e.Status)
	assert.Equal(t, machine.DecidedByTimeout, e.DecidedBy)
	assert.Equal(t, "timer", e.LastTransition.Actor)
	assert.Contains(t, e.StatusReason, "approved (onTimeout approve)")

	// Its high-risk cousin: rejected, saying why it was not approved.
	var perm claudecode.PermissionRequestOutput
	data = hookReply(t, held)
	require.NoError(t, json.Unmarshal(data, &perm), string(data))
	assert.Equal(t, claudecode.Deny, perm.HookSpecificOutput.Decision.Behavior, string(data))
	e = waitStatus(t, cl, machine.PendingID("s-late", "a2"), machine.StateRejectedByTimeout)
	assert.Contains(t, e.StatusReason, "not approved as onTimeout says, because the call's risk is high")
	assert.Equal(t, machine.DecidedByTimeout, e.DecidedBy)

	// The HTTP API's make clean: cancelled by the timer.
	bustest.Eventually(t, 15*time.Second, 20*time.Millisecond, "the HTTP call cancelled", func() (bool, any) {
		status, body = httpDo(t, "GET", base+"/v1/tool-calls/"+cancelled, "viewer", nil)
		return status == 200 && body["status"] == "CANCELLED_BY_SYSTEM", body["status"]
	})
	assert.Equal(t, "timeout", body["decidedBy"])
	assert.Contains(t, body["statusReason"], "cancelled (onTimeout cancel)")

	// The CLI's deploy: rejected by timeout, exit 3.
	select {
	case r := <-cliDone:
		assert.Equal(t, exitRejected, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "timed out")
	case <-time.After(20 * time.Second):
		t.Fatal("submit --wait did not return")
	}
	r := cli(t, nats, "show", machine.PendingID("c-late", "d1"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "REJECTED_BY_TIMEOUT")
}

package mcpgateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// testPolicy: echo and hang run, delete_file is denied outright, the rest
// asks a human (who may answer write_file with its result); team "quick"
// rejects what nobody decided within 300ms.
const testPolicy = `
default:
  requiresApprovalTools: all
  respondable: [mcp__files__write_file]
  rules:
    allow: ["mcp__files__echo", "mcp__files__hang", "mcp__files__fail"]
    deny: ["mcp__files__delete_file"]
teams:
  quick:
    approvalTimeoutMs: 300
    autoRejectOnTimeout: true
`

var (
	buildOnce sync.Once
	upstream  string
	buildErr  error
)

// upstreamBinary builds testdata/upstream, a real MCP server on stdio,
// once per test run.
func upstreamBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpgateway-upstream-")
		if err != nil {
			buildErr = err
			return
		}
		upstream = filepath.Join(dir, "upstream")
		if out, err := exec.Command("go", "build", "-o", upstream, "./testdata/upstream").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./testdata/upstream: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return upstream
}

func TestMain(m *testing.M) {
	code := m.Run()
	if upstream != "" {
		os.RemoveAll(filepath.Dir(upstream))
	}
	os.Exit(code)
}

// env is a real toolgate, an agent's and an approver's client of it, and
// the log of what the upstream server received.
type env struct {
	t        *testing.T
	g        *toolgatetest.Gate
	agent    *client.Client
	approver *client.Client
	log      string
}

func start(t *testing.T) *env {
	t.Helper()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: testPolicy})
	_, agent := g.ConnectAs(t, "agent")
	_, approver := g.ConnectAs(t, "approver")
	return &env{t: t, g: g, agent: agent, approver: approver, log: filepath.Join(t.TempDir(), "upstream.log")}
}

// files is the config of the upstream stdio server "files".
func (e *env) files() mcpgateway.Upstream {
	return mcpgateway.Upstream{Command: mcpgateway.Argv{upstreamBinary(e.t)}, Env: map[string]string{"UPSTREAM_LOG": e.log}}
}

func (e *env) gateway(servers map[string]mcpgateway.Upstream, opts mcpgateway.Options) *mcpgateway.Gateway {
	e.t.Helper()
	gw, err := mcpgateway.New(&mcpgateway.Config{Servers: servers}, e.agent, opts)
	require.NoError(e.t, err)
	return gw
}

// connect serves one session of gw over an in-memory pipe (as stdio
// would) and connects a real SDK client, named name, to it.
func (e *env) connect(gw *mcpgateway.Gateway, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	cs, _ := e.connectPipe(gw, name, opts)
	return cs
}

// connectPipe is connect, also returning the client's end of the pipe: a
// client process that dies is its pipe closing.
func (e *env) connectPipe(gw *mcpgateway.Gateway, name string, opts *mcp.ClientOptions) (*mcp.ClientSession, net.Conn) {
	e.t.Helper()
	gwEnd, clientEnd := net.Pipe()
	st := &mcp.IOTransport{Reader: gwEnd, Writer: gwEnd}
	ct := &mcp.IOTransport{Reader: clientEnd, Writer: clientEnd}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, opts).Connect(e.t.Context(), ct, nil)
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		<-served
	})
	return cs, clientEnd
}

// upstreamCall is a line of the upstream's log.
type upstreamCall struct {
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	PID      int             `json:"pid"`
	Protocol string          `json:"protocol"`
}

// received is what the upstream server received, in order.
func (e *env) received() []upstreamCall {
	data, err := os.ReadFile(e.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(e.t, err)
	var calls []upstreamCall
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var c upstreamCall
		require.NoError(e.t, json.Unmarshal(sc.Bytes(), &c))
		calls = append(calls, c)
	}
	return calls
}

// calls lists toolgate's calls of a tool, as the approver sees them.
func (e *env) calls(tool string) []*machine.Entry {
	e.t.Helper()
	all, err := e.approver.List(e.t.Context(), wire.ListRequest{ToolName: tool})
	require.NoError(e.t, err)
	return all
}

// only waits until toolgate has one call of tool, in state, and returns it.
func (e *env) only(tool string, state machine.State) *machine.Entry {
	e.t.Helper()
	var found *machine.Entry
	bustest.Eventually(e.t, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("one call of %s, %s", tool, state), func() (bool, any) {
		all := e.calls(tool)
		if len(all) == 1 && all[0].Status == state {
			found = all[0]
			return true, nil
		}
		return false, describe(all)
	})
	return found
}

func describe(entries []*machine.Entry) string {
	var s []string
	for _, e := range entries {
		s = append(s, fmt.Sprintf("%s %s %s %q", e.PendingID, e.Status, e.ToolArguments, e.StatusReason))
	}
	return fmt.Sprint(s)
}

// callAsync calls a tool and delivers what it got.
type answer struct {
	res *mcp.CallToolResult
	err error
}

func callAsync(ctx context.Context, cs *mcp.ClientSession, name string, args any) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		out <- answer{res, err}
	}()
	return out
}

func await(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("the tool call was not answered within 30s")
		return answer{}
	}
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.NotNil(t, res)
	require.NotEmpty(t, res.Content)
	tc, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "content %T", res.Content[0])
	return tc.Text
}

func TestGateway_AllowedCallRunsAndCompletes(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "allow-test", nil)

	tools, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"echo", "write_file", "fail", "hang"}, names,
		"one upstream: its own names; delete_file, which the policy denies outright, is left out")

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.Equal(t, "echo: hi", text(t, res))
	got := e.received()
	require.Len(t, got, 1)
	assert.JSONEq(t, `{"text":"hi"}`, string(got[0].Args))

	done := e.only("mcp__files__echo", machine.StateCompletedSuccess)
	assert.Equal(t, "agent", done.CallerBotID, "the caller is the gateway's credential")
	assert.True(t, strings.HasPrefix(done.ConversationID, "allow-test-"), "the conversation is the client's session: %s", done.ConversationID)
	assert.Contains(t, string(done.Result), `"echo: hi"`, "the upstream's result is recorded")

	// A tool that answers an error is recorded as failed, and the
	// client gets the server's answer as it is.
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "fail"})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Equal(t, "disk full", text(t, res))
	failed := e.only("mcp__files__fail", machine.StateCompletedFailure)
	assert.Contains(t, failed.Error, "disk full")

	// A denied tool called anyway is refused without reaching it.
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "delete_file", Arguments: map[string]any{"path": "/"}})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), `denied by policy: rules.deny "mcp__files__delete_file" (default)`)
	assert.Len(t, e.received(), 2, "echo and fail reached the upstream; delete_file never did")

	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "no_such_tool"})
	assert.ErrorContains(t, err, `unknown tool "no_such_tool"`)
	assert.Empty(t, e.calls("mcp__files__no_such_tool"), "nobody is asked about a tool the server does not have")
}

func TestGateway_AskThenApprove(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "approve-test", nil)

	answered := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "a.txt", "content": "x"})
	pending := e.only("mcp__files__write_file", machine.StatePendingApproval)
	assert.Empty(t, e.received(), "nothing reaches the upstream before the approval")
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: true, Reason: "fine"})
	require.NoError(t, err)

	a := await(t, answered)
	require.NoError(t, a.err)
	assert.False(t, a.res.IsError, text(t, a.res))
	assert.Equal(t, "wrote a.txt", text(t, a.res))
	got := e.received()
	require.Len(t, got, 1)
	assert.JSONEq(t, `{"path":"a.txt","content":"x"}`, string(got[0].Args))
	done := e.only("mcp__files__write_file", machine.StateCompletedSuccess)
	assert.Equal(t, "approver", done.ApprovedOrRejectedByUserID)
	require.NotNil(t, done.LastTransition)
	assert.Equal(t, "agent", done.LastTransition.Actor, "the gateway recorded the outcome, as itself")
}

func TestGateway_AskThenRejectNeverReachesTheUpstream(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "reject-test", nil)

	answered := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "/etc/passwd", "content": "x"})
	pending := e.only("mcp__files__write_file", machine.StatePendingApproval)
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: false, Reason: "not /etc"})
	require.NoError(t, err)

	a := await(t, answered)
	require.NoError(t, a.err, "a refusal is a tool result, not a protocol error")
	assert.True(t, a.res.IsError, "a refusal is never a success")
	assert.Contains(t, text(t, a.res), "rejected by approver: not /etc")
	assert.Equal(t, pending.PendingID, a.res.Meta[mcpgateway.MetaPendingID])
	assert.Empty(t, e.received(), "the upstream never heard of the call")
	e.only("mcp__files__write_file", machine.StateRejectedByUser)
}

// TestGateway_AnsweredAndInterrupted: a call an approver answered with
// its result gets that result as the tool's, and never reaches the
// upstream; a rejection that stops the turn is an error result marked so.
func TestGateway_AnsweredAndInterrupted(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "answer-test", nil)

	answered := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "a.txt", "content": "x"})
	pending := e.only("mcp__files__write_file", machine.StatePendingApproval)
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Result: json.RawMessage(`{"bytes":1}`), Reason: "pretend"})
	require.NoError(t, err)
	a := await(t, answered)
	require.NoError(t, a.err)
	assert.False(t, a.res.IsError, text(t, a.res))
	assert.JSONEq(t, `{"bytes":1}`, text(t, a.res))
	assert.Equal(t, map[string]any{"bytes": float64(1)}, a.res.StructuredContent)
	assert.Equal(t, "approver", a.res.Meta[mcpgateway.MetaRespondedBy])
	assert.Empty(t, e.received(), "the upstream never heard of the call")
	e.only("mcp__files__write_file", machine.StateCompletedSuccess)

	stopped := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "b.txt", "content": "y"})
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the second write_file pending", func() (bool, any) {
		for _, c := range e.calls("mcp__files__write_file") {
			if c.Status == machine.StatePendingApproval {
				pending = c
				return true, nil
			}
		}
		return false, describe(e.calls("mcp__files__write_file"))
	})
	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Reason: "stop here", Interrupt: true})
	require.NoError(t, err)
	a = await(t, stopped)
	require.NoError(t, a.err)
	assert.True(t, a.res.IsError)
	assert.True(t, strings.HasPrefix(text(t, a.res), mcpgateway.InterruptMarker), text(t, a.res))
	assert.Contains(t, text(t, a.res), "stop here")
	assert.Equal(t, true, a.res.Meta[mcpgateway.MetaInterrupt])
}

func TestGateway_ApprovedWithEditedArgumentsRunsTheEdit(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "edit-test", nil)

	answered := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "/etc/hosts", "content": "x"})
	pending := e.only("mcp__files__write_file", machine.StatePendingApproval)
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: true, Reason: "in the sandbox",
		Arguments: json.RawMessage(`{"path":"/tmp/hosts","content":"x"}`)})
	require.NoError(t, err)

	a := await(t, answered)
	require.NoError(t, a.err)
	assert.Equal(t, "wrote /tmp/hosts", text(t, a.res))
	got := e.received()
	require.Len(t, got, 1)
	assert.JSONEq(t, `{"path":"/tmp/hosts","content":"x"}`, string(got[0].Args), "the upstream receives the approver's edit, not the client's")
	done := e.only("mcp__files__write_file", machine.StateCompletedSuccess)
	assert.JSONEq(t, `{"path":"/etc/hosts","content":"x"}`, string(done.OriginalArguments))
}

// TestGateway_ArgumentsThatAreNotTheApprovedOnesNeverRun: the approval
// binds to the arguments digest the entry records. Arguments changed
// behind toolgate's back (a write to the bucket that only toolgate's own
// credential can make) do not match it: the upstream never hears of the
// call, the client gets a tool error, and the call ends failed.
func TestGateway_ArgumentsThatAreNotTheApprovedOnesNeverRun(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "tamper-test", nil)

	answered := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "/tmp/a", "content": "x"})
	pending := e.only("mcp__files__write_file", machine.StatePendingApproval)
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{"path":"/tmp/a","content":"x"}`)), pending.ArgumentsDigest)
	assert.NotZero(t, pending.PolicyRevision, "the stored policy's revision that evaluated it")

	nc, _ := e.g.ConnectAs(t, "toolgate")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(t.Context(), wire.CallsBucket)
	require.NoError(t, err)
	kve, err := kv.Get(t.Context(), pending.PendingID)
	require.NoError(t, err)
	var tampered machine.Entry
	require.NoError(t, json.Unmarshal(kve.Value(), &tampered))
	tampered.ToolArguments = json.RawMessage(`{"path":"/etc/passwd","content":"x"}`)
	data, err := json.Marshal(&tampered)
	require.NoError(t, err)
	_, err = kv.Update(t.Context(), pending.PendingID, data, kve.Revision())
	require.NoError(t, err)

	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: true})
	require.NoError(t, err)
	a := await(t, answered)
	require.NoError(t, a.err)
	assert.True(t, a.res.IsError)
	assert.Contains(t, text(t, a.res), "do not match the digest its approval bound them to")
	assert.Empty(t, e.received(), "the upstream never heard of the call")
	e.only("mcp__files__write_file", machine.StateCompletedFailure)
}

func TestGateway_NobodyDecides(t *testing.T) {
	t.Parallel()
	e := start(t)
	files := map[string]mcpgateway.Upstream{"files": e.files()}

	t.Run("approval timeout", func(t *testing.T) {
		t.Parallel()
		cs := e.connect(e.gateway(files, mcpgateway.Options{Team: "quick"}), "timeout-test", nil)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "t"}})
		require.NoError(t, err)
		assert.True(t, res.IsError)
		assert.Contains(t, text(t, res), "timed out")
		bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the timer rejects the call", func() (bool, any) {
			for _, c := range e.calls("mcp__files__write_file") {
				if c.Team == "quick" {
					return c.Status == machine.StateRejectedByTimeout, c.Status
				}
			}
			return false, "no call"
		})
	})
	t.Run("the client's timeout", func(t *testing.T) {
		t.Parallel()
		// A 2s client timeout leaves the call 1s to be decided.
		cs := e.connect(e.gateway(files, mcpgateway.Options{Timeout: 2 * time.Second}), "wait-test", nil)
		start := time.Now()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "w"}})
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 2*time.Second, "answered before the client gives up")
		assert.True(t, res.IsError)
		assert.Contains(t, text(t, res), "withdrawn: no decision within 1s")
		for _, c := range e.calls("mcp__files__write_file") {
			if c.Team == "" {
				assert.Equal(t, machine.StateCancelled, c.Status, c.StatusReason)
			}
		}
	})
	t.Cleanup(func() { assert.Empty(t, e.received(), "nothing undecided reaches the upstream") })
}

func TestGateway_UpstreamCrashMidCall(t *testing.T) {
	t.Parallel()
	e := start(t)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "crash-test", nil)

	answered := callAsync(t.Context(), cs, "hang", map[string]any{})
	var pid int
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the upstream runs the call", func() (bool, any) {
		got := e.received()
		if len(got) == 1 {
			pid = got[0].PID
		}
		return pid != 0, got
	})
	running := e.only("mcp__files__hang", machine.StateExecuting)
	assert.Equal(t, "agent", running.Lease.Holder, "claimed by the gateway before the upstream heard of it")
	proc, err := os.FindProcess(pid)
	require.NoError(t, err)
	require.NoError(t, proc.Kill())

	a := await(t, answered)
	require.NoError(t, a.err)
	assert.True(t, a.res.IsError)
	assert.Contains(t, text(t, a.res), "MCP server files failed during the call")
	failed := e.only("mcp__files__hang", machine.StateCompletedFailure)
	assert.Contains(t, failed.Error, "MCP server files failed during the call")

	// The next call starts the server again.
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "again"}})
	require.NoError(t, err)
	assert.Equal(t, "echo: again", text(t, res))
	got := e.received()
	require.Len(t, got, 2)
	assert.NotEqual(t, pid, got[1].PID, "a new process")
}

func TestGateway_ClientThatStopsWaitingWithdrawsItsCalls(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})

	t.Run("cancelled request", func(t *testing.T) {
		t.Parallel()
		cs := e.connect(gw, "cancel-test", nil)
		ctx, cancel := context.WithCancel(t.Context())
		answered := callAsync(ctx, cs, "write_file", map[string]any{"path": "cancelled"})
		pending := e.pendingIn("cancel-test")
		cancel() // the SDK client sends notifications/cancelled
		assert.ErrorIs(t, await(t, answered).err, context.Canceled)
		e.ends(pending.PendingID, machine.StateCancelled, "withdrawn: the MCP client cancelled the request")
	})
	t.Run("disconnected", func(t *testing.T) {
		t.Parallel()
		cs, pipe := e.connectPipe(gw, "disconnect-test", nil)
		answered := callAsync(t.Context(), cs, "write_file", map[string]any{"path": "disconnected"})
		pending := e.pendingIn("disconnect-test")
		require.NoError(t, pipe.Close()) // the client is gone: EOF
		assert.Error(t, await(t, answered).err)
		e.ends(pending.PendingID, machine.StateCancelled, "withdrawn: the MCP client disconnected")
	})
	t.Cleanup(func() { assert.Empty(t, e.received()) })
}

// pendingIn waits for the pending call of the session whose client is
// named client.
func (e *env) pendingIn(client string) *machine.Entry {
	e.t.Helper()
	var found *machine.Entry
	bustest.Eventually(e.t, 30*time.Second, 10*time.Millisecond, "a pending call of "+client, func() (bool, any) {
		all := e.calls("mcp__files__write_file")
		for _, c := range all {
			if strings.HasPrefix(c.ConversationID, client+"-") && c.Status == machine.StatePendingApproval {
				found = c
				return true, nil
			}
		}
		return false, describe(all)
	})
	return found
}

// ends waits until the call pendingID is in state, for a reason saying why.
func (e *env) ends(pendingID string, state machine.State, why string) {
	e.t.Helper()
	bustest.Eventually(e.t, 30*time.Second, 10*time.Millisecond, pendingID+" "+string(state), func() (bool, any) {
		c, err := e.approver.Get(e.t.Context(), pendingID)
		require.NoError(e.t, err)
		return c.Status == state && strings.Contains(c.StatusReason, why), describe([]*machine.Entry{c})
	})
}

// docsServer is an in-process MCP server, served over streamable HTTP,
// with a tool, a resource, a prompt and completions.
func docsServer(t *testing.T) (*mcp.Server, string, <-chan http.Header) {
	t.Helper()
	docs := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, &mcp.ServerOptions{
		Instructions: "Search the docs before answering.",
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{req.Params.Argument.Value + "ce", req.Params.Argument.Value + "ne"}}}, nil
		},
	})
	docs.AddTool(&mcp.Tool{Name: "search", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "found " + string(req.Params.Arguments)}}}, nil
	})
	docs.AddResource(&mcp.Resource{URI: "docs://readme", Name: "readme", MIMEType: "text/plain"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "read me first"}}}, nil
	})
	docs.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "name"}}}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Hello, " + req.Params.Arguments["name"]}}}}, nil
	})
	headers := make(chan http.Header, 100)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return docs }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case headers <- r.Header.Clone():
		default:
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return docs, srv.URL, headers
}

// TestGateway_OverHTTPInFrontOfTwoServers: the gateway serves streamable
// HTTP in front of a stdio server and a streamable-HTTP one, names their
// tools and prompts <server>__<name>, and forwards resources, prompts,
// completions and list changes.
func TestGateway_OverHTTPInFrontOfTwoServers(t *testing.T) {
	t.Parallel()
	e := start(t)
	docs, docsURL, headers := docsServer(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{
		"files": e.files(),
		"docs":  {URL: docsURL, Headers: map[string]string{"X-Home": "${HOME}"}},
	}, mcpgateway.Options{})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	changed := make(chan struct{}, 10)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL}, withSessions)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })

	ir := cs.InitializeResult()
	assert.NotNil(t, ir.Capabilities.Resources)
	assert.NotNil(t, ir.Capabilities.Prompts)
	assert.NotNil(t, ir.Capabilities.Completions)
	assert.Contains(t, ir.Instructions, "docs (tools and prompts named docs__…): Search the docs before answering.")
	select {
	case h := <-headers:
		assert.Equal(t, os.Getenv("HOME"), h.Get("X-Home"), "configured headers are sent, ${NAME} expanded")
	default:
		t.Fatal("the docs server was not asked anything")
	}

	tools, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"docs__search", "files__echo", "files__write_file", "files__fail", "files__hang"}, names)

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"text": "over http"}})
	require.NoError(t, err)
	assert.Equal(t, "echo: over http", text(t, res))

	answered := callAsync(t.Context(), cs, "docs__search", map[string]any{"q": "toolgate"})
	pending := e.only("mcp__docs__search", machine.StatePendingApproval)
	assert.True(t, strings.HasPrefix(pending.ConversationID, "http-test-"), pending.ConversationID)
	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: pending.PendingID, Approved: true})
	require.NoError(t, err)
	a := await(t, answered)
	require.NoError(t, a.err)
	assert.Equal(t, `found {"q":"toolgate"}`, text(t, a.res))
	e.only("mcp__docs__search", machine.StateCompletedSuccess)

	resources, err := cs.ListResources(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, resources.Resources, 1)
	read, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "docs://readme"})
	require.NoError(t, err)
	assert.Equal(t, "read me first", read.Contents[0].Text)
	prompts, err := cs.ListPrompts(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, prompts.Prompts, 1)
	assert.Equal(t, "docs__greet", prompts.Prompts[0].Name)
	prompt, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "docs__greet", Arguments: map[string]string{"name": "Ann"}})
	require.NoError(t, err)
	assert.Equal(t, "Hello, Ann", prompt.Messages[0].Content.(*mcp.TextContent).Text)
	completed, err := cs.Complete(t.Context(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "docs__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "Ali"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"Alice", "Aline"}, completed.Completion.Values)

	// A tool added upstream is announced, and listed.
	docs.AddTool(&mcp.Tool{Name: "index", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no notifications/tools/list_changed within 30s")
	}
	tools, err = cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	assert.Len(t, tools.Tools, 6)

	// The client ends its session (DELETE) while a call waits: it is
	// withdrawn at once, saying why.
	answered = callAsync(t.Context(), cs, "files__write_file", map[string]any{"path": "x"})
	pending = e.only("mcp__files__write_file", machine.StatePendingApproval)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	e.ends(pending.PendingID, machine.StateCancelled, "withdrawn: the MCP client ended its session")
	<-answered
	assert.Len(t, e.received(), 1, "only the echo reached the stdio server")
}

// A policy stored before toolgate refused rules that cannot read their
// argument may still hold one: the gateway then refuses to list its tools,
// naming the argument each tool's schema marks, rather than serve tools
// whose calls the rule denies or asks about whatever they hold.
func TestGateway_ARuleThatCannotReadItsArgumentIsRefusedWithItsFix(t *testing.T) {
	t.Parallel()
	e := start(t)
	kv, err := e.g.JS.KeyValue(t.Context(), wire.PoliciesBucket)
	require.NoError(t, err)
	_, err = kv.Put(t.Context(), "document", []byte("default:\n  rules:\n    allow: [\"mcp__files__write_file(/tmp/**)\"]\n"))
	require.NoError(t, err)
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "unreadable-test", nil)
	var listErr error
	bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, "tools/list refused once the policy is in force", func() (bool, any) {
		_, listErr = cs.ListTools(t.Context(), nil)
		return listErr != nil, listErr
	})
	assert.ErrorContains(t, listErr, "add to the policy matchArgument: {mcp__files__write_file: path}")
}

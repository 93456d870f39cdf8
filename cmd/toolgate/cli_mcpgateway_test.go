package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

const gatewayPolicy = `
default:
  requiresApprovalTools: all
  rules:
    allow: ["mcp__files__echo"]
    deny: ["mcp__files__delete_file"]
`

var (
	upstreamOnce sync.Once
	upstreamBin  string
	upstreamErr  error
)

// upstreamServer builds internal/mcpgateway/testdata/upstream, a real MCP server
// on stdio that logs every call it receives to $UPSTREAM_LOG.
func upstreamServer(t *testing.T) string {
	t.Helper()
	upstreamOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toolgate-upstream-")
		if err != nil {
			upstreamErr = err
			return
		}
		upstreamBin = filepath.Join(dir, "upstream")
		if out, err := exec.Command("go", "build", "-o", upstreamBin, "../../internal/mcpgateway/testdata/upstream").CombinedOutput(); err != nil {
			upstreamErr = fmt.Errorf("go build upstream: %v\n%s", err, out)
		}
	})
	require.NoError(t, upstreamErr)
	return upstreamBin
}

// rpc is a JSON-RPC client written by hand: newline-delimited JSON-RPC
// 2.0 messages on a process's stdin and stdout, as MCP's stdio transport
// specifies them, and nothing of the SDK.
type rpc struct {
	t       *testing.T
	stdin   io.WriteCloser
	mu      sync.Mutex
	waiting map[int]chan map[string]any
	lines   chan error // a line that is not one JSON-RPC message
}

func newRPC(t *testing.T, stdin io.WriteCloser, stdout io.Reader) *rpc {
	r := &rpc{t: t, stdin: stdin, waiting: map[int]chan map[string]any{}, lines: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var msg map[string]any
			if err := json.Unmarshal(sc.Bytes(), &msg); err != nil || msg["jsonrpc"] != "2.0" {
				select {
				case r.lines <- fmt.Errorf("stdout line is not a JSON-RPC message: %q", sc.Text()):
				default:
				}
				continue
			}
			id, isResponse := msg["id"].(float64)
			if !isResponse || msg["method"] != nil {
				continue // a notification or a request of the server's
			}
			r.mu.Lock()
			ch := r.waiting[int(id)]
			r.mu.Unlock()
			if ch != nil {
				ch <- msg
			}
		}
	}()
	return r
}

// send writes one message, on one line.
func (r *rpc) send(msg map[string]any) {
	r.t.Helper()
	data, err := json.Marshal(msg)
	require.NoError(r.t, err)
	require.NotContains(r.t, string(data), "\n")
	_, err = r.stdin.Write(append(data, '\n'))
	require.NoError(r.t, err)
}

// call sends a request and returns a channel for its response.
func (r *rpc) call(id int, method string, params any) <-chan map[string]any {
	ch := make(chan map[string]any, 1)
	r.mu.Lock()
	r.waiting[id] = ch
	r.mu.Unlock()
	r.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return ch
}

// result waits for a response and returns its result, failing on an error.
func (r *rpc) result(ch <-chan map[string]any) map[string]any {
	r.t.Helper()
	select {
	case msg := <-ch:
		require.Nil(r.t, msg["error"], "error response: %v", msg)
		res, ok := msg["result"].(map[string]any)
		require.True(r.t, ok, "response without a result: %v", msg)
		return res
	case err := <-r.lines:
		r.t.Fatal(err)
	case <-time.After(30 * time.Second):
		r.t.Fatal("no response within 30s")
	}
	return nil
}

// toolText is the first text of a tools/call result, and its isError.
func toolText(t *testing.T, res map[string]any) (string, bool) {
	t.Helper()
	content, _ := res["content"].([]any)
	require.NotEmpty(t, content, "result: %v", res)
	first := content[0].(map[string]any)
	require.Equal(t, "text", first["type"])
	isError, _ := res["isError"].(bool)
	return first["text"].(string), isError
}

// TestMCPGateway_HandWrittenClientOverStdio drives the built `toolgate
// mcp-gateway` binary with a JSON-RPC client written by hand, no SDK on
// the client's side: an allowed call runs, a rejected one never reaches
// the upstream, an edited one runs with the approver's arguments.
func TestMCPGateway_HandWrittenClientOverStdio(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: gatewayPolicy})
	_, approver := g.ConnectAs(t, "approver")
	dir := t.TempDir()
	logPath := filepath.Join(dir, "upstream.log")
	config := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, "servers:\n  files:\n    command: [%q]\n    env: {UPSTREAM_LOG: %q}\n", upstreamServer(t), logPath), 0o600))

	cmd := exec.Command(toolgateBinary(t), "mcp-gateway", "--config", config,
		"--nats", g.NATSURL, "--nats-creds", server.CredsPath(g.Data, "agent"))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the gateway's stderr:\n%s", stderr.String())
		}
	})
	r := newRPC(t, stdin, stdout)

	init := r.result(r.call(1, "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "handwritten", "version": "0.1"},
	}))
	assert.Equal(t, "2025-06-18", init["protocolVersion"])
	assert.NotNil(t, init["capabilities"].(map[string]any)["tools"])
	r.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})

	list := r.result(r.call(2, "tools/list", map[string]any{}))
	var names []string
	for _, tool := range list["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	assert.Contains(t, names, "echo")
	assert.Contains(t, names, "write_file")
	assert.NotContains(t, names, "delete_file", "denied outright: left out")

	// Allowed: runs at once.
	text, isError := toolText(t, r.result(r.call(3, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}})))
	assert.False(t, isError)
	assert.Equal(t, "echo: hi", text)

	pending := func(known ...string) *machine.Entry {
		t.Helper()
		var found *machine.Entry
		bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "a new pending call of mcp__files__write_file", func() (bool, any) {
			all, err := approver.List(t.Context(), wire.ListRequest{ToolName: "mcp__files__write_file", Status: machine.StatePendingApproval})
			if err != nil {
				return false, err // asked again: a list may go unanswered on a loaded machine
			}
			for _, e := range all {
				if !slices.Contains(known, e.PendingID) {
					found = e
					return true, nil
				}
			}
			return false, fmt.Sprintf("%d pending, all known", len(all))
		})
		return found
	}

	// Rejected: an error result naming who and why; the upstream never
	// hears of it.
	rejected := r.call(4, "tools/call", map[string]any{"name": "write_file", "arguments": map[string]any{"path": "/etc/passwd", "content": "x"}})
	first := pending()
	assert.True(t, strings.HasPrefix(first.ConversationID, "handwritten-"), first.ConversationID)
	assert.Equal(t, "agent", first.CallerBotID)
	_, err = approver.Decide(t.Context(), wire.DecideRequest{PendingID: first.PendingID, Approved: false, Reason: "not /etc"})
	require.NoError(t, err)
	text, isError = toolText(t, r.result(rejected))
	assert.True(t, isError)
	assert.Contains(t, text, "rejected by approver: not /etc")

	// Edited: the upstream runs the approver's arguments.
	edited := r.call(5, "tools/call", map[string]any{"name": "write_file", "arguments": map[string]any{"path": "/etc/hosts", "content": "x"}})
	second := pending(first.PendingID)
	_, err = approver.Decide(t.Context(), wire.DecideRequest{PendingID: second.PendingID, Approved: true, Reason: "sandboxed",
		Arguments: json.RawMessage(`{"path":"/tmp/hosts","content":"x"}`)})
	require.NoError(t, err)
	text, isError = toolText(t, r.result(edited))
	assert.False(t, isError)
	assert.Equal(t, "wrote /tmp/hosts", text)

	data, err := os.ReadFile(logPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 2, "the upstream got the echo and the edit, never the rejected call: %s", data)
	for i, want := range []struct{ tool, args string }{{"echo", `{"text":"hi"}`}, {"write_file", `{"path":"/tmp/hosts","content":"x"}`}} {
		var c struct {
			Tool string          `json:"tool"`
			Args json.RawMessage `json:"args"`
		}
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &c))
		assert.Equal(t, want.tool, c.Tool)
		assert.JSONEq(t, want.args, string(c.Args))
	}
	done, err := approver.Get(t.Context(), second.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, done.Status)

	// The client closes stdin: the gateway exits cleanly.
	require.NoError(t, stdin.Close())
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		assert.NoError(t, err, "the gateway exits 0 when its client goes")
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not exit within 30s of its stdin closing")
	}
}

func TestMCPGateway_CommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte("servers: {files: {command: [true]}}\n"), 0o600))
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("servers: {files: {url: ftp://x}}\n"), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--config: required"},
		{[]string{"--config", bad}, "servers.files.url: want an http or https URL"},
		{[]string{"--config", good, "--http", "0.0.0.0:8081"}, "not a loopback address"},
		{[]string{"--config", good, "--wait", "60", "--timeout", "60"}, "at most 50s"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"mcp-gateway"}, tc.args...), &stdout, &stderr)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

// syncWriter lets the process's stderr be read while it is written.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestMCPServers_StartAndAnswerWhileToolgateIsDown: with no toolgate
// where --nats says, `toolgate mcp-gateway` and `toolgate mcp` start,
// answer initialize, and answer each call within the connect timeout,
// naming the outage; their stderr has toolgate's log, not NATS's own
// lines.
func TestMCPServers_StartAndAnswerWhileToolgateIsDown(t *testing.T) {
	t.Parallel()
	natsURL := "nats://" + freeAddr(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, "servers:\n  files:\n    command: [%q]\n", upstreamServer(t)), 0o600))

	connect := func(t *testing.T, args ...string) (*mcp.ClientSession, *syncWriter) {
		t.Helper()
		cmd := exec.Command(toolgateBinary(t), append(args, "--nats", natsURL, "--data", dir)...)
		stderr := &syncWriter{w: &bytes.Buffer{}}
		cmd.Stderr = stderr
		session, err := mcp.NewClient(&mcp.Implementation{Name: "outage-test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
		require.NoError(t, err, "it answers initialize")
		t.Cleanup(func() { session.Close() })
		return session, stderr
	}
	call := func(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
		t.Helper()
		began := time.Now()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		assert.Less(t, time.Since(began), 6*time.Second, "answered within the connect timeout")
		require.Len(t, res.Content, 1)
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	noRawNATS := func(t *testing.T, stderr *syncWriter) {
		stderr.mu.Lock()
		defer stderr.mu.Unlock()
		for line := range strings.SplitSeq(stderr.w.(*bytes.Buffer).String(), "\n") {
			assert.False(t, strings.HasPrefix(line, "nats:"), "a raw NATS line: %s", line)
		}
	}

	t.Run("mcp-gateway", func(t *testing.T) {
		t.Parallel()
		cs, stderr := connect(t, "mcp-gateway", "--config", config)
		for range 2 {
			text, isError := call(t, cs, "echo", map[string]any{"text": "hi"})
			assert.True(t, isError)
			assert.Contains(t, text, "toolgate: mcp__files__echo was not run: ")
			assert.Contains(t, text, "toolgate is unreachable at "+natsURL)
		}
		noRawNATS(t, stderr)
	})
	t.Run("mcp", func(t *testing.T) {
		t.Parallel()
		cs, stderr := connect(t, "mcp")
		text, isError := call(t, cs, "approve", map[string]any{"tool_name": "Bash", "input": map[string]any{"command": "ls"}, "tool_use_id": "u1"})
		assert.False(t, isError)
		var out claudecode.PermissionResult
		require.NoError(t, json.Unmarshal([]byte(text), &out))
		assert.Equal(t, claudecode.Deny, out.Behavior)
		assert.Contains(t, out.Message, "toolgate could not decide: ")
		assert.Contains(t, out.Message, "toolgate is unreachable at "+natsURL)
		noRawNATS(t, stderr)
	})
}

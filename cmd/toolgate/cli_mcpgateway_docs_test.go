package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// section is a fenced code block of a markdown document and the heading
// it is under.
type section struct {
	heading, lang, text string
	line                int
}

func sections(t *testing.T, doc []byte) []section {
	t.Helper()
	var (
		out     []section
		cur     *section
		heading string
		body    strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(line, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &section{heading: heading, lang: strings.TrimPrefix(trimmed, "```"), line: n}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		}
	}
	require.Nil(t, cur, "an unclosed code block")
	return out
}

// mcpServerEntry is a server in Claude Desktop's and Cursor's mcpServers,
// and VS Code's servers.
type mcpServerEntry struct {
	Type    string            `json:"type"` // VS Code
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
}

// codexServer is a [mcp_servers.NAME] table of Codex's config.toml.
type codexServer struct {
	Command           string            `toml:"command"`
	Args              []string          `toml:"args"`
	Env               map[string]string `toml:"env"`
	URL               string            `toml:"url"`
	BearerTokenEnvVar string            `toml:"bearer_token_env_var"`
	StartupTimeoutSec int               `toml:"startup_timeout_sec"`
	ToolTimeoutSec    int               `toml:"tool_timeout_sec"`
}

// TestMCPGateway_DocsEverySnippetWorks: every snippet of
// docs/mcp-gateway.md parses as its client reads it, and starts (or
// reaches) a gateway that lists and runs a tool through a real toolgate:
// the gateway config, the credential, the HTTP command line, and the
// config of Claude Desktop, Cursor, VS Code and Codex.
func TestMCPGateway_DocsEverySnippetWorks(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "mcp-gateway.md"))
	require.NoError(t, err)
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: gatewayPolicy})
	nats := served(t, g)
	dir := t.TempDir()
	config := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, "servers:\n  files:\n    command: [%q]\n", upstreamServer(t)), 0o600))
	creds := server.CredsPath(g.Data, "agent") // until the page's creds add issues one
	flags := func(args []string) []string {
		return replaceFlags(args, map[string]string{"--config": config, "--nats": nats, "--nats-creds": creds})
	}
	httpAddrs := map[string]string{} // the page's --http address: the test's

	// The page's replies of a JSON-RPC exchange (the tasks section), by
	// id: its jsonl block's messages are checked against them.
	replies := map[float64]map[string]any{}
	for _, s := range sections(t, doc) {
		var msg map[string]any
		if s.lang == "json" && json.Unmarshal([]byte(s.text), &msg) == nil && msg["jsonrpc"] != nil {
			id, ok := msg["id"].(float64)
			require.True(t, ok, "docs/mcp-gateway.md:%d: a reply names its request's id", s.line)
			replies[id] = msg
		}
	}
	_, approver := g.ConnectAs(t, "approver")

	seen := map[string]int{}
	checkedReplies := 0
	for _, s := range sections(t, doc) {
		where := fmt.Sprintf("docs/mcp-gateway.md:%d (%s)", s.line, s.heading)
		switch s.lang {
		case "yaml":
			cfg, err := mcpgateway.ParseConfig([]byte(s.text))
			require.NoError(t, err, where)
			assert.NotEmpty(t, cfg.Servers, where)
			seen["config"]++
		case "sh":
			for _, line := range strings.Split(strings.TrimSpace(s.text), "\n") {
				args := strings.Fields(line)
				require.GreaterOrEqual(t, len(args), 2, where)
				require.Equal(t, "toolgate", args[0], where)
				switch args[1] {
				case "creds":
					i := slices.Index(args, "--out")
					require.Positive(t, i, "%s: --out says where the credential goes", where)
					args[i+1] = filepath.Join(dir, "doc.creds")
					r := cli(t, nats, args[1:]...)
					require.Equal(t, 0, r.code, "%s: %s", where, r.stderr)
					creds = args[i+1]
					seen["creds"]++
				case "mcp-gateway":
					i := slices.Index(args, "--http")
					require.Positive(t, i, "%s: a gateway the page starts by hand serves HTTP", where)
					addr := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
					httpAddrs[args[i+1]] = addr
					args[i+1] = addr
					startHTTPGateway(t, where, flags(args[1:]), addr)
					seen["http"]++
				default:
					t.Errorf("%s: a shell line this test does not know: %s", where, line)
				}
			}
		case "jsonl":
			checkedReplies += checkTasksExchange(t, where, s.text, replies, flags([]string{"mcp-gateway", "--config", "", "--nats", "", "--nats-creds", ""}), approver)
			seen["tasks"]++
		case "json":
			var top map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(s.text), &top), "%s: parses", where)
			var servers map[string]mcpServerEntry
			switch {
			case top["jsonrpc"] != nil:
				continue // a reply, checked with its exchange
			case top["mcpServers"] != nil:
				require.Contains(t, []string{"Claude Desktop", "Cursor"}, s.heading, "%s: mcpServers is Claude Desktop's and Cursor's", where)
				var cfg struct {
					MCPServers map[string]mcpServerEntry `json:"mcpServers"`
				}
				require.NoError(t, strictly([]byte(s.text), &cfg), where)
				servers = cfg.MCPServers
			case top["servers"] != nil:
				require.Equal(t, "VS Code", s.heading, "%s: servers is VS Code's", where)
				var cfg struct {
					Servers map[string]mcpServerEntry `json:"servers"`
				}
				require.NoError(t, strictly([]byte(s.text), &cfg), where)
				servers = cfg.Servers
			default:
				t.Errorf("%s: a JSON block this test does not know", where)
			}
			for name, srv := range servers {
				w := where + " " + name
				switch {
				case srv.URL != "":
					assert.Empty(t, srv.Command, w)
					if s.heading == "VS Code" {
						assert.Equal(t, "http", srv.Type, "%s: VS Code says the type", w)
					}
					checkHTTPGateway(t, w, srv.URL, httpAddrs)
				default:
					if s.heading == "VS Code" {
						assert.Equal(t, "stdio", srv.Type, "%s: VS Code says the type", w)
					} else {
						assert.Empty(t, srv.Type, w)
					}
					require.Equal(t, "toolgate", srv.Command, w)
					checkStdioGateway(t, w, flags(srv.Args), srv.Env, nats)
				}
				seen[s.heading]++
			}
		case "toml":
			require.Equal(t, "Codex", s.heading, where)
			var cfg struct {
				MCPServers map[string]codexServer `toml:"mcp_servers"`
			}
			md, err := toml.Decode(s.text, &cfg)
			require.NoError(t, err, where)
			assert.Empty(t, md.Undecoded(), "%s: keys Codex's config does not have", where)
			require.NotEmpty(t, cfg.MCPServers, where)
			for name, srv := range cfg.MCPServers {
				w := where + " " + name
				require.Equal(t, "toolgate", srv.Command, w)
				i := slices.Index(srv.Args, "--timeout")
				require.Positive(t, i, "%s: --timeout is Codex's tool_timeout_sec", w)
				assert.Equal(t, strconv.Itoa(srv.ToolTimeoutSec), srv.Args[i+1], "%s: --timeout is Codex's tool_timeout_sec", w)
				checkStdioGateway(t, w, flags(srv.Args), srv.Env, nats)
				seen[s.heading]++
			}
		default:
			t.Errorf("%s: a %q block this test does not know", where, s.lang)
		}
	}
	assert.Equal(t, len(replies), checkedReplies, "every reply the page shows belongs to an exchange it shows")
	for _, kind := range []string{"config", "creds", "http", "Claude Desktop", "Cursor", "VS Code", "Codex", "tasks"} {
		assert.Positive(t, seen[kind], "the page shows a %s snippet, and the test checked it", kind)
	}
}

// checkStdioGateway starts `toolgate` with args and env, as the client
// would, and runs a tool through it.
func checkStdioGateway(t *testing.T, where string, args []string, env map[string]string, nats string) {
	t.Helper()
	require.NotEmpty(t, args, where)
	require.Equal(t, "mcp-gateway", args[0], where)
	cmd := exec.Command(toolgateBinary(t), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		if k == "TOOLGATE_NATS" {
			v = nats
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if !slices.Contains(args, "--nats") && env["TOOLGATE_NATS"] == "" {
		t.Errorf("%s: says no toolgate to connect to", where)
		return
	}
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "docs-test", Version: "1"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err, "%s: %s", where, &stderr)
	defer cs.Close()
	runEcho(t, where, cs)
}

// startHTTPGateway starts `toolgate` with args and waits until it
// listens on addr.
func startHTTPGateway(t *testing.T, where string, args []string, addr string) {
	t.Helper()
	cmd := exec.Command(toolgateBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	require.NoError(t, cmd.Start(), where)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("%s: the gateway exited (%v): %s", where, err, &stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not listening on %s within 30s: %s", where, addr, &stderr)
		}
	}
}

// checkHTTPGateway reaches the gateway the page started by hand at its
// URL, and runs a tool through it.
func checkHTTPGateway(t *testing.T, where, raw string, addrs map[string]string) {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err, where)
	addr, ok := addrs[u.Host]
	require.True(t, ok, "%s: %s is not where the page's mcp-gateway --http listens (%v)", where, u.Host, addrs)
	u.Host = addr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "docs-test", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: u.String()}, nil)
	require.NoError(t, err, where)
	defer cs.Close()
	runEcho(t, where, cs)
}

// runEcho lists the tools and runs echo, which gatewayPolicy allows.
func runEcho(t *testing.T, where string, cs *mcp.ClientSession) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err, where)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	assert.Contains(t, names, "echo", where)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "docs"}})
	require.NoError(t, err, where)
	require.NotEmpty(t, res.Content, where)
	assert.Equal(t, "echo: docs", res.Content[0].(*mcp.TextContent).Text, where)
}

// checkTasksExchange sends a gateway started with args, on stdio, the
// client's messages of the page's exchange (one per line), and holds what
// it answers to the page's replies: the same fields, and the same
// resultType, status and result (a task's status, a tool result's
// content, in the 2025-11-25 form). A tasks/get whose page reply is
// completed waits for an approver to approve the task's call, as the page
// says, and polls until it is; a tasks/result, which waits for the call
// to end, is sent once it is approved.
func checkTasksExchange(t *testing.T, where, script string, replies map[float64]map[string]any, args []string, approver *client.Client) int {
	t.Helper()
	cmd := exec.Command(toolgateBinary(t), args...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err, where)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err, where)
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	require.NoError(t, cmd.Start(), where)
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	r := newRPC(t, stdin, stdout)
	var taskID any
	checked, shown := 0, 0
	for line := range strings.SplitSeq(strings.TrimSpace(script), "\n") {
		var msg map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &msg), "%s: %s", where, line)
		id, isCall := msg["id"].(float64)
		if !isCall {
			r.send(msg)
			continue
		}
		method, _ := msg["method"].(string)
		params, _ := msg["params"].(map[string]any)
		if _, ok := params["taskId"]; ok {
			require.NotNil(t, taskID, "%s: a task is polled after a call answered with one", where)
			params["taskId"] = taskID // the page's stands for the one the call got
		}
		want := replies[id]
		if want != nil {
			shown++
		}
		wantResult, _ := want["result"].(map[string]any)
		approve := func() {
			_, err := approver.Decide(t.Context(), wire.DecideRequest{PendingID: taskID.(string), Approved: true, Reason: "docs"})
			require.NoError(t, err, where)
		}
		var got map[string]any
		switch {
		case method == "tasks/get" && wantResult["status"] == "completed":
			approve()
			bustest.Eventually(t, 30*time.Second, 50*time.Millisecond, where+": the task completes", func() (bool, any) {
				got = r.result(r.call(int(id), method, params))
				return got["status"] == "completed", got
			})
		case method == "tasks/result":
			approve()
			got = r.result(r.call(int(id), method, params))
		default:
			got = r.result(r.call(int(id), method, params))
		}
		if method == "tools/call" {
			taskID = got["taskId"]
			if task, ok := got["task"].(map[string]any); ok {
				taskID = task["taskId"]
			}
		}
		if want == nil {
			continue
		}
		checked++
		assert.ElementsMatch(t, slices.Collect(maps.Keys(wantResult)), slices.Collect(maps.Keys(got)), "%s: the reply to %s has the page's fields", where, method)
		for _, k := range []string{"resultType", "status", "result", "content"} {
			assert.Equal(t, withoutServerInfo(wantResult[k]), withoutServerInfo(got[k]), "%s: %s's %s", where, method, k)
		}
		if task, ok := wantResult["task"].(map[string]any); ok {
			assert.Equal(t, task["status"], got["task"].(map[string]any)["status"], "%s: %s's task's status", where, method)
		}
		if msg, ok := wantResult["statusMessage"].(string); ok {
			before, _, _ := strings.Cut(msg, " on ")
			assert.True(t, strings.HasPrefix(got["statusMessage"].(string), before+" on "+taskID.(string)), "%s: %q, as the page's %q", where, got["statusMessage"], msg)
		}
	}
	assert.Equal(t, shown, checked, "%s: every reply the page shows is one the exchange got: %s", where, &stderr)
	return checked
}

// withoutServerInfo is a tool's result without the name its server gives
// itself in _meta (the page's server is not the test's), which stays.
func withoutServerInfo(v any) any {
	res, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := maps.Clone(res)
	if meta, ok := out["_meta"].(map[string]any); ok {
		meta = maps.Clone(meta)
		if _, named := meta["io.modelcontextprotocol/serverInfo"]; named {
			meta["io.modelcontextprotocol/serverInfo"] = "(the server's)"
		}
		out["_meta"] = meta
	}
	return out
}

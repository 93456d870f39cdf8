package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/toolgatetest"
)

// fence is one fenced code block of a markdown file.
type fence struct {
	lang, text string
	line       int
}

// fences returns the fenced code blocks of a markdown document.
func fences(t *testing.T, doc []byte) []fence {
	t.Helper()
	var (
		out  []fence
		cur  *fence
		body strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &fence{lang: strings.TrimPrefix(trimmed, "```"), line: n}
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

// docsPolicy lets the snippets' sample call (npm test) run.
const docsPolicy = `
default:
  requiresApprovalTools: [Bash]
  rules:
    allow: ["Bash(npm test:*)"]
`

// docsToken is the HTTP hooks' $TOOLGATE_TOKEN.
const docsToken = "docs-agent-token-0001"

// sampleInput is a hook input for event, as Claude Code documents it, for
// a call docsPolicy lets run.
func sampleInput(event string, n int) string {
	in := map[string]any{"session_id": "docs", "transcript_path": "/t.jsonl", "cwd": "/p", "permission_mode": "default",
		"hook_event_name": event, "tool_name": "Bash", "tool_input": map[string]any{"command": "npm test"}}
	switch event {
	case claudecode.EventPermissionRequest:
		in["permission_suggestions"] = []any{}
	case claudecode.EventPostToolUse:
		in["tool_use_id"], in["tool_response"] = fmt.Sprintf("toolu_docs_%d", n), map[string]any{"stdout": "ok"}
	case claudecode.EventPostToolUseFailure:
		in["tool_use_id"], in["error"] = fmt.Sprintf("toolu_docs_%d", n), "exit status 1"
	default:
		in["tool_use_id"] = fmt.Sprintf("toolu_docs_%d", n)
	}
	data, _ := json.Marshal(in)
	return string(data)
}

// strictly decodes data into v, refusing fields v does not have.
func strictly(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// checkAnswer checks a hook's answer has the shape of event's.
func checkAnswer(t *testing.T, where, event string, answer []byte) {
	t.Helper()
	switch event {
	case claudecode.EventPreToolUse:
		var out claudecode.PreToolUseOutput
		require.NoError(t, strictly(answer, &out), "%s: %s", where, answer)
		assert.Equal(t, claudecode.Allow, out.HookSpecificOutput.PermissionDecision, "%s: %s", where, answer)
	case claudecode.EventPermissionRequest:
		var out claudecode.PermissionRequestOutput
		require.NoError(t, strictly(answer, &out), "%s: %s", where, answer)
		assert.Equal(t, claudecode.Allow, out.HookSpecificOutput.Decision.Behavior, "%s: %s", where, answer)
	default:
		assert.JSONEq(t, `{}`, string(answer), where)
	}
}

// Every snippet of docs/claude-code.md parses, and does what the page
// says when pointed at a real toolgate: each settings block's command
// hooks run (their flags are the verb's), its HTTP hooks reach routes
// that answer, the MCP server block starts a server with the tool the
// claude command line names, the output examples have the shapes the
// hooks print, the policy parses and the permissions move over as they
// are. Not parallel: the hook reads the process's stdin.
func TestClaudeCodeDocs_EverySnippetWorks(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "claude-code.md"))
	require.NoError(t, err)
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: docsPolicy, Tokens: docsToken + " docs-agent agent\n"})
	nats := served(t, g)
	agentCreds := server.CredsPath(g.Data, "agent")

	var (
		creds       = agentCreds // until the page's `creds add` issues one
		docCreds    string       // the path the page writes it to
		mcpServers  []string
		channels    []string
		mcpToolHook []string // the servers mcp_tool hooks name
		permissions []string
		yamlRules   []string
		seen        = map[string]int{}
		n           int
	)
	for _, b := range fences(t, doc) {
		where := fmt.Sprintf("docs/claude-code.md:%d", b.line)
		switch b.lang {
		case "sh":
			for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
				args := strings.Fields(line)
				switch {
				case len(args) > 2 && args[0] == "toolgate" && args[1] == "creds":
					seen["creds"]++
					i := slices.Index(args, "--out")
					require.Positive(t, i, "%s: --out says where the credential goes", where)
					docCreds = args[i+1]
					args[i+1] = filepath.Join(t.TempDir(), "doc.creds")
					r := cli(t, nats, args[1:]...)
					require.Equal(t, 0, r.code, "%s: %s", where, r.stderr)
					creds = args[i+1]
				case len(args) > 0 && args[0] == "claude" && slices.Contains(args, "--permission-prompt-tool"):
					seen["claude"]++
					i := slices.Index(args, "--permission-prompt-tool")
					require.NotEmpty(t, mcpServers, "%s: the MCP server block comes first", where)
					assert.Equal(t, "mcp__"+mcpServers[len(mcpServers)-1]+"__"+claudecode.ApproveToolName, args[i+1], "%s: names the server's tool", where)
				case len(args) == 3 && args[0] == "claude" && (args[1] == "--channels" || args[1] == "--dangerously-load-development-channels"):
					seen["claude --channels"]++
					name, ok := strings.CutPrefix(args[2], "server:")
					require.True(t, ok, "%s: a channel of .mcp.json is server:NAME", where)
					assert.Contains(t, channels, name, "%s: names the channel's server block, shown before", where)
				default:
					t.Errorf("%s: a shell line this test does not know: %s", where, line)
				}
			}
		case "yaml":
			seen["yaml"]++
			d, err := policy.Parse([]byte(b.text))
			require.NoError(t, err, where)
			yamlRules = append(append(append(yamlRules, d.Default.Rules.Allow...), d.Default.Rules.Ask...), d.Default.Rules.Deny...)
		case "json":
			var top map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(b.text), &top), "%s: parses", where)
			switch {
			case top["hooks"] != nil:
				var settings struct {
					Hooks map[string][]struct {
						Matcher string           `json:"matcher"`
						Hooks   []map[string]any `json:"hooks"`
					} `json:"hooks"`
				}
				require.NoError(t, strictly([]byte(b.text), &settings), where)
				for event, groups := range settings.Hooks {
					for _, group := range groups {
						for _, h := range group.Hooks {
							n++
							checkHook(t, where+" "+event, g, nats, event, h, func(path string) string {
								if path == docCreds {
									return creds
								}
								return agentCreds
							}, n)
							seen[fmt.Sprint(h["type"])]++
							if h["type"] == "mcp_tool" {
								mcpToolHook = append(mcpToolHook, fmt.Sprint(h["server"]))
							}
						}
					}
				}
			case top["mcpServers"] != nil:
				seen["mcp"]++
				var cfg struct {
					MCPServers map[string]struct {
						Command string   `json:"command"`
						Args    []string `json:"args"`
					} `json:"mcpServers"`
				}
				require.NoError(t, strictly([]byte(b.text), &cfg), where)
				for name, s := range cfg.MCPServers {
					require.Equal(t, "toolgate", s.Command, where)
					args := replaceFlags(s.Args, map[string]string{"--nats": nats, "--nats-creds": agentCreds})
					if len(args) > 0 && args[0] == "claude-channel" {
						seen["channel"]++
						channels = append(channels, name)
						checkChannel(t, where, args)
						continue
					}
					mcpServers = append(mcpServers, name)
					checkMCP(t, where, args)
				}
			case top["hookSpecificOutput"] != nil:
				seen["output"]++
				var out struct {
					HookSpecificOutput struct {
						HookEventName string `json:"hookEventName"`
					} `json:"hookSpecificOutput"`
				}
				require.NoError(t, json.Unmarshal([]byte(b.text), &out), where)
				if out.HookSpecificOutput.HookEventName == claudecode.EventPreToolUse {
					seen["PreToolUse output"]++
					var pre claudecode.PreToolUseOutput
					require.NoError(t, strictly([]byte(b.text), &pre), "%s: the shape the hook prints", where)
					d := pre.HookSpecificOutput
					assert.Contains(t, []claudecode.Behavior{claudecode.Allow, claudecode.Deny, claudecode.Ask, claudecode.Defer}, d.PermissionDecision, where)
					assert.NotEmpty(t, d.PermissionDecisionReason, "%s: says why", where)
					assert.NotEmpty(t, d.AdditionalContext, "%s: tells the model what decided", where)
					continue
				}
				require.Equal(t, claudecode.EventPermissionRequest, out.HookSpecificOutput.HookEventName, "%s: the page shows PermissionRequest's", where)
				var pr claudecode.PermissionRequestOutput
				require.NoError(t, strictly([]byte(b.text), &pr), "%s: the shape the hook prints", where)
				checkPermission(t, where, pr.HookSpecificOutput.Decision)
			case top["behavior"] != nil:
				seen["tool result"]++
				var pr claudecode.PermissionResult
				require.NoError(t, strictly([]byte(b.text), &pr), "%s: the shape the MCP tool returns", where)
				checkPermission(t, where, pr)
			case top["permissions"] != nil:
				seen["permissions"]++
				var p struct {
					Permissions struct{ Allow, Ask, Deny []string } `json:"permissions"`
				}
				require.NoError(t, strictly([]byte(b.text), &p), where)
				permissions = append(append(append(permissions, p.Permissions.Allow...), p.Permissions.Ask...), p.Permissions.Deny...)
			default:
				t.Errorf("%s: a JSON block this test does not know", where)
			}
		default:
			t.Errorf("%s: a %q block this test does not know", where, b.lang)
		}
	}
	assert.Equal(t, permissions, yamlRules, "the permissions block moves over as it is")
	for _, server := range mcpToolHook {
		assert.Contains(t, mcpServers, server, "an mcp_tool hook names a toolgate mcp server the page registers")
	}
	for _, kind := range []string{"creds", "claude", "yaml", "command", "http", "mcp_tool", "mcp", "channel", "claude --channels",
		"output", "PreToolUse output", "tool result", "permissions"} {
		assert.Positive(t, seen[kind], "the page shows a %s snippet, and the test checked it", kind)
	}
}

// replaceFlags replaces the values of the flags in with.
func replaceFlags(args []string, with map[string]string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if v, ok := with[out[i]]; ok {
			out[i+1] = v
		}
	}
	return out
}

// hookKeys are the settings a hook handler of either type may have.
var hookKeys = map[string][]string{
	"command":  {"type", "command", "timeout"},
	"http":     {"type", "url", "headers", "allowedEnvVars", "timeout"},
	"mcp_tool": {"type", "server", "tool", "input", "timeout"},
}

// substitution is a ${path} of an mcp_tool hook's input, which Claude Code
// fills in from the hook's input.
var substitution = regexp.MustCompile(`\$\{([A-Za-z_.]+)\}`)

// substitute fills in the ${path}s of an mcp_tool hook's input from the
// hook's input (an object as its JSON).
func substitute(t *testing.T, input map[string]any, hookInput string) map[string]any {
	t.Helper()
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(hookInput), &in))
	out := map[string]any{}
	for k, v := range input {
		s, ok := v.(string)
		if !ok {
			out[k] = v
			continue
		}
		out[k] = substitution.ReplaceAllStringFunc(s, func(ref string) string {
			var cur any = in
			for _, part := range strings.Split(substitution.FindStringSubmatch(ref)[1], ".") {
				m, _ := cur.(map[string]any)
				cur = m[part]
			}
			if str, ok := cur.(string); ok {
				return str
			}
			data, _ := json.Marshal(cur)
			return string(data)
		})
	}
	return out
}

var envRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// checkHook runs one hook handler of a settings block against g.
func checkHook(t *testing.T, where string, g *toolgatetest.Gate, nats, event string, h map[string]any, creds func(string) string, n int) {
	t.Helper()
	handled := []string{claudecode.EventPreToolUse, claudecode.EventPermissionRequest, claudecode.EventPostToolUse, claudecode.EventPostToolUseFailure, claudecode.EventPermissionDenied}
	require.Contains(t, handled, event, where)
	typ, _ := h["type"].(string)
	known, ok := hookKeys[typ]
	require.True(t, ok, "%s: hook type %q", where, typ)
	for k := range h {
		assert.Contains(t, known, k, "%s: a %s hook has no setting %q", where, typ, k)
	}
	waits := event == claudecode.EventPreToolUse || event == claudecode.EventPermissionRequest || event == claudecode.EventPermissionDenied
	timeout, hasTimeout := h["timeout"].(float64)

	switch typ {
	case "command":
		args := strings.Fields(h["command"].(string))
		require.GreaterOrEqual(t, len(args), 3, where)
		require.Equal(t, []string{"toolgate", "hook", "claude-code"}, args[:3], where)
		flags := args[3:]
		if waits {
			i := slices.Index(flags, "--timeout")
			settings := 600.0 // Claude Code's default for a command hook
			if hasTimeout {
				settings = timeout
			}
			require.Positive(t, i, "%s: --timeout tells the hook its timeout", where)
			assert.Equal(t, fmt.Sprint(settings), flags[i+1], "%s: --timeout is the hook's \"timeout\"", where)
		}
		if i := slices.Index(flags, "--nats-creds"); i >= 0 {
			flags[i+1] = creds(flags[i+1])
		}
		if !slices.Contains(flags, "--nats") {
			flags = append(flags, "--nats", nats) // the page's default, nats://127.0.0.1:4222, is not the test's
		}
		flags = replaceFlags(flags, map[string]string{"--nats": nats})
		stdin = strings.NewReader(sampleInput(event, n))
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"hook", "claude-code"}, flags...), &stdout, &stderr)
		stdin = nil
		require.Equal(t, 0, code, "%s: %s", where, stderr.String())
		checkAnswer(t, where, event, stdout.Bytes())
	case "http":
		u, err := url.Parse(h["url"].(string))
		require.NoError(t, err, where)
		hook, ok := strings.CutPrefix(u.Path, "/v1/integrations/claude-code/")
		require.True(t, ok, "%s: %s", where, u.Path)
		for k := range u.Query() {
			assert.Contains(t, []string{"timeout", "wait", "team", "headless"}, k, "%s: the hook takes no ?%s=", where, k)
		}
		if waits {
			settings := "30" // Claude Code's default for an HTTP hook
			if hasTimeout {
				settings = fmt.Sprint(timeout)
			}
			assert.Equal(t, settings, u.Query().Get("timeout"), "%s: ?timeout= is the hook's \"timeout\"", where)
		}
		headers, _ := h["headers"].(map[string]any)
		allowed, _ := h["allowedEnvVars"].([]any)
		for _, v := range headers {
			for _, m := range envRef.FindAllStringSubmatch(fmt.Sprint(v), -1) {
				assert.Contains(t, allowed, m[1], "%s: Claude Code fills $%s only when allowedEnvVars lists it", where, m[1])
			}
		}
		base, err := url.Parse(g.HTTPURL)
		require.NoError(t, err)
		u.Scheme, u.Host = base.Scheme, base.Host
		req, err := http.NewRequestWithContext(t.Context(), "POST", u.String(), strings.NewReader(sampleInput(event, n)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, strings.ReplaceAll(fmt.Sprint(v), "$TOOLGATE_TOKEN", docsToken))
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, where)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s (%s)", where, body, hook)
		checkAnswer(t, where, event, body)
	case "mcp_tool":
		input, _ := h["input"].(map[string]any)
		args := []string{"mcp", "--nats", nats, "--nats-creds", creds("")}
		if hasTimeout {
			args = append(args, "--timeout", fmt.Sprint(timeout))
		}
		session, err := mcp.NewClient(&mcp.Implementation{Name: "docs-test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: exec.Command(toolgateBinary(t), args...)}, nil)
		require.NoError(t, err, where)
		defer session.Close()
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: fmt.Sprint(h["tool"]), Arguments: substitute(t, input, sampleInput(event, n))})
		require.NoError(t, err, where)
		require.False(t, res.IsError, where)
		require.Len(t, res.Content, 1, where)
		checkAnswer(t, where, event, []byte(res.Content[0].(*mcp.TextContent).Text))
	}
}

// checkChannel starts `toolgate` with args, as Claude Code starts a
// channel, and relays it a permission prompt the policy allows.
func checkChannel(t *testing.T, where string, args []string) {
	t.Helper()
	cmd := exec.Command(toolgateBinary(t), args...)
	cmd.Env = append(os.Environ(), "CLAUDE_CODE_SESSION_ID=docs-channel")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err, where)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err, where)
	require.NoError(t, cmd.Start(), where)
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	_, err = io.WriteString(stdin, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"docs-test","version":"1"}}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/claude/channel/permission_request","params":{"request_id":"docsa","tool_name":"Bash","description":"Run the tests","input_preview":"{\"command\":\"npm test\"}"}}`+"\n")
	require.NoError(t, err, where)
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `"docsa"`) {
			assert.JSONEq(t, `{"jsonrpc":"2.0","method":"notifications/claude/channel/permission","params":{"request_id":"docsa","behavior":"allow"}}`, sc.Text(), where)
			return
		}
	}
	t.Errorf("%s: the channel did not answer the prompt: %q", where, lines)
}

// checkMCP starts `toolgate` with args, as Claude Code would, and asks
// its tool about a call the policy lets run.
func checkMCP(t *testing.T, where string, args []string) {
	t.Helper()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "docs-test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: exec.Command(toolgateBinary(t), args...)}, nil)
	require.NoError(t, err, where)
	defer session.Close()
	res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: claudecode.ApproveToolName,
		Arguments: map[string]any{"tool_name": "Bash", "input": map[string]any{"command": "npm test"}, "tool_use_id": "toolu_docs_mcp"}})
	require.NoError(t, err, where)
	require.Len(t, res.Content, 1, where)
	var out claudecode.PermissionResult
	require.NoError(t, strictly([]byte(res.Content[0].(*mcp.TextContent).Text), &out), where)
	assert.Equal(t, claudecode.Allow, out.Behavior, where)
}

// checkPermission checks an example decision says what its behavior needs.
func checkPermission(t *testing.T, where string, d claudecode.PermissionResult) {
	t.Helper()
	switch d.Behavior {
	case claudecode.Allow:
		assert.True(t, json.Valid(d.UpdatedInput) && len(d.UpdatedInput) > 0, "%s: an allow carries the input to run", where)
		assert.Empty(t, d.Message, where)
	case claudecode.Deny:
		assert.NotEmpty(t, d.Message, "%s: a deny says why", where)
		assert.Empty(t, d.UpdatedInput, where)
	default:
		t.Errorf("%s: behavior %q: allow or deny", where, d.Behavior)
	}
}

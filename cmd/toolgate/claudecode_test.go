package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// startWithHTTP runs every role in-process under policy and returns its
// NATS URL and the HTTP API's base URL.
func startWithHTTP(t *testing.T, policy string) (natsURL, httpURL string) {
	t.Helper()
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: policy})
	return served(t, g), g.HTTPURL
}

const hookPolicy = `
default:
  requiresApprovalTools: [Bash]
  rules:
    deny: ["Bash(rm -rf *)"]
    allow: ["Bash(npm test:*)"]
`

func TestClaudeCodeHTTPHooks(t *testing.T) {
	t.Parallel()
	nats, base := startWithHTTP(t, hookPolicy)
	post := func(hook string, body string) (int, []byte) {
		req, err := http.NewRequest("POST", base+"/v1/integrations/claude-code/"+hook, bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Toolgate-User", "claude-on-laptop")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes()
	}
	in := func(event, command, id string) string {
		return `{"session_id":"s1","hook_event_name":"` + event + `","tool_name":"Bash","tool_input":{"command":"` + command + `"},"tool_use_id":"` + id + `"}`
	}

	status, body := post("pre-tool-use", in("PreToolUse", "npm test", "t1"))
	require.Equal(t, 200, status, string(body))
	var pre claudecode.PreToolUseOutput
	require.NoError(t, json.Unmarshal(body, &pre))
	assert.Equal(t, claudecode.Allow, pre.HookSpecificOutput.PermissionDecision)

	status, body = post("permission-request", in("PermissionRequest", "rm -rf /tmp/x", "t2"))
	require.Equal(t, 200, status, string(body))
	var perm claudecode.PermissionRequestOutput
	require.NoError(t, json.Unmarshal(body, &perm))
	assert.Equal(t, claudecode.Deny, perm.HookSpecificOutput.Decision.Behavior)
	assert.Contains(t, perm.HookSpecificOutput.Decision.Message, "rm -rf")

	status, body = post("post-tool-use", `{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"npm test"},"tool_use_id":"t1","tool_response":{"stdout":"ok"}}`)
	require.Equal(t, 200, status, string(body))
	assert.JSONEq(t, `{}`, string(body))

	// ?headless=true: a call that waits for a human is deferred, and
	// stays pending; a value that is no boolean is refused, in a deny.
	status, body = post("pre-tool-use?headless=true", in("PreToolUse", "git push", "t5"))
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &pre))
	assert.Equal(t, claudecode.Defer, pre.HookSpecificOutput.PermissionDecision, string(body))
	status, body = post("pre-tool-use?headless=maybe", in("PreToolUse", "git push", "t6"))
	require.Equal(t, 200, status, string(body))
	require.NoError(t, json.Unmarshal(body, &pre))
	assert.Equal(t, claudecode.Deny, pre.HookSpecificOutput.PermissionDecision, string(body))
	assert.Contains(t, pre.HookSpecificOutput.PermissionDecisionReason, `?headless=: want true or false, got "maybe"`)

	// PermissionDenied: the classifier's denial of a call the policy
	// would let run stands, and is recorded.
	status, body = post("permission-denied", `{"session_id":"s1","hook_event_name":"PermissionDenied","permission_mode":"auto","tool_name":"Bash",`+
		`"tool_input":{"command":"npm test"},"tool_use_id":"t7","reason":"not asked for"}`)
	require.Equal(t, 200, status, string(body))
	assert.JSONEq(t, `{}`, string(body))
	denied, err := agent(t, nats).Get(t.Context(), machine.PendingID("s1", "cc-classifier_t7"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByPolicy, denied.Status)
	assert.Equal(t, machine.DecidedByClassifier, denied.DecidedBy)

	// Refused, in a 200 Claude Code reads: it runs the call on any other
	// status. Neither event blocks anything, so they are told.
	status, body = post("pre-tool-use", in("PostToolUse", "npm test", "t3"))
	assert.Equal(t, 200, status, "an event posted to the wrong hook is refused")
	var notice claudecode.Notice
	require.NoError(t, json.Unmarshal(body, &notice))
	assert.Contains(t, notice.SystemMessage, "hook_event_name")
	status, body = post("on-stop", in("Stop", "x", "t4"))
	assert.Equal(t, 200, status)
	require.NoError(t, json.Unmarshal(body, &notice))
	assert.Contains(t, notice.SystemMessage, "no such Claude Code hook here")
}

func TestHTTP_AnalyticsAndMetricsServed(t *testing.T) {
	t.Parallel()
	_, base := startWithHTTP(t, hookPolicy)
	resp, err := http.Get(base + "/v1/analytics")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	var report map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&report))
	assert.NotEmpty(t, report)

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	assert.Contains(t, body.String(), `toolgate_consumer_pending_messages{consumer="toolgate-relay"`, "every role in one process: the exporter too")
	assert.Contains(t, body.String(), "go_goroutines")
}

// A command hook that cannot authenticate, or whose credential may not
// submit calls, blocks the call whatever --on-error says, saying why; no
// call is submitted.
func TestHookCommand_BadCredentialBlocks(t *testing.T) {
	url, _ := startWithHTTP(t, hookPolicy)
	other, _ := startWithHTTP(t, hookPolicy)
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"another toolgate's credential": {[]string{"--nats-creds", server.CredsPath(servetest.DataDir(t, other), "agent")}, "refused the hook's credential"},
		"a wrong password":              {[]string{"--nats-user", "nobody", "--nats-password", "wrong"}, "--nats-creds"},
		"a viewer's credential":         {[]string{"--nats-creds", server.CredsPath(servetest.DataDir(t, url), "viewer")}, "may not"},
	} {
		for _, onError := range []string{"deny", "ask"} {
			input := fmt.Sprintf(preToolUse, "rm -rf /", "bad-credential")
			code, out, stderr := runHook(t, input, append(c.args, "--nats", url, "--on-error", onError)...)
			assert.Equal(t, 0, code, "%s: %s", name, stderr)
			assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision, "%s, --on-error %s", name, onError)
			assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, c.want, name)
		}
	}
	calls, err := agent(t, url).List(t.Context(), wire.ListRequest{ConversationID: "sess-1"})
	require.NoError(t, err)
	assert.Empty(t, calls, "nothing was submitted")
}

// An input the hook cannot read exits 2, which Claude Code takes as a
// block, never 1, which it takes as leave to run the call.
func TestHookCommand_UnreadableInputBlocks(t *testing.T) {
	url, _ := startWithHTTP(t, hookPolicy)
	for _, input := range []string{`not json`, `{"hook_event_name":"PreToolUse"}`} {
		code, _, stderr := runHook(t, input, "--nats", url, "--nats-creds", server.CredsPath(servetest.DataDir(t, url), "agent"))
		assert.Equal(t, 2, code, input)
		assert.Contains(t, stderr, "toolgate hook: stdin:", input)
	}
}

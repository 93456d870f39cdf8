package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/claudecode"
	"github.com/toolgate/toolgate/toolgatetest"
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
	_, base := startWithHTTP(t, hookPolicy)
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

	status, body = post("pre-tool-use", in("PostToolUse", "npm test", "t3"))
	assert.Equal(t, 400, status, "an event posted to the wrong hook is refused")
	assert.Contains(t, string(body), "hook_event_name")
	status, _ = post("on-stop", in("Stop", "x", "t4"))
	assert.Equal(t, 404, status)
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

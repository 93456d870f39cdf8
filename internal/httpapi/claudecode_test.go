package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

const hookPolicy = `
default:
  requiresApprovalTools: [Bash]
  rules:
    allow: ["Bash(npm test:*)"]
`

// hookServer serves the HTTP API (and the roles behind it) under
// hookPolicy; bot-1 holds an agent token.
func hookServer(t *testing.T) *toolgatetest.Gate {
	t.Helper()
	return toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "http"}, Policy: hookPolicy, Tokens: tokens})
}

// postHook posts a hook input as bot-1, with ctx, and returns the status
// and body.
func postHook(ctx context.Context, t *testing.T, g *toolgatetest.Gate, pathAndQuery, body string) (int, string, error) {
	return postHookWith(ctx, t, g, "Bearer agent-token-000000001", pathAndQuery, body)
}

// postHookWith posts a hook input with authorization as its Authorization
// header (none when ""), as Claude Code's HTTP hook sends it.
func postHookWith(ctx context.Context, t *testing.T, g *toolgatetest.Gate, authorization, pathAndQuery, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", g.HTTPURL+"/v1/integrations/claude-code/"+pathAndQuery, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), nil
}

// permissionRequest is a PermissionRequest input: no tool_use_id.
func permissionRequest(session, command string) string {
	return `{"session_id":"` + session + `","transcript_path":"/t.jsonl","cwd":"/p","permission_mode":"default","hook_event_name":"PermissionRequest",` +
		`"tool_name":"Bash","tool_input":{"command":"` + command + `"},"permission_suggestions":[]}`
}

// sessionCalls lists a session's calls, as toolgate itself sees them.
func sessionCalls(t *testing.T, g *toolgatetest.Gate, session string) []*machine.Entry {
	t.Helper()
	all, err := g.Client.List(t.Context(), wire.ListRequest{ConversationID: session})
	require.NoError(t, err)
	return all
}

func TestClaudeCodeHTTPHook_WaitWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	status, body, err := postHook(t.Context(), t, g, "permission-request?wait=0.5&timeout=30", permissionRequest("http-wait", "git push"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{}`, body, "nobody answered within ?wait=: Claude Code's dialog decides")
	all := sessionCalls(t, g, "http-wait")
	require.Len(t, all, 1)
	assert.Equal(t, machine.StateCancelled, all[0].Status)
	assert.Contains(t, all[0].StatusReason, "withdrawn: no decision within 500ms")
	assert.Equal(t, "bot-1", all[0].CallerBotID, "the token's user")
}

func TestClaudeCodeHTTPHook_ClientGoneWithdrawsTheCall(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := postHook(ctx, t, g, "permission-request?timeout=600", permissionRequest("http-gone", "git push"))
		done <- err
	}()
	var pending *machine.Entry
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the call is pending", func() (bool, any) {
		all := sessionCalls(t, g, "http-gone")
		if len(all) == 1 && all[0].Status == machine.StatePendingApproval {
			pending = all[0]
			return true, nil
		}
		return false, all
	})
	cancel() // Claude Code gives up: its hook timeout, or the session ended
	assert.ErrorIs(t, <-done, context.Canceled)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the call is withdrawn", func() (bool, any) {
		e, err := g.Client.Get(t.Context(), pending.PendingID)
		return err == nil && e.Status == machine.StateCancelled, e
	})
	e, err := g.Client.Get(t.Context(), pending.PendingID)
	require.NoError(t, err)
	assert.Contains(t, e.StatusReason, "Claude Code stopped waiting (the HTTP hook's client closed the connection)")
}

// preToolUse is a PreToolUse input for Bash.
func preToolUse(session, command, toolUseID string) string {
	return `{"session_id":"` + session + `","transcript_path":"/t.jsonl","cwd":"/p","permission_mode":"default","hook_event_name":"PreToolUse",` +
		`"tool_name":"Bash","tool_input":{"command":"` + command + `"},"tool_use_id":"` + toolUseID + `"}`
}

// hookAnswer is what the hooks answer, any event's fields.
type hookAnswer struct {
	HookSpecificOutput struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
		Decision                 struct {
			Behavior string `json:"behavior"`
			Message  string `json:"message"`
		} `json:"decision"`
	} `json:"hookSpecificOutput"`
	SystemMessage string `json:"systemMessage"`
}

// denied asserts that a hook's answer is a 200 that blocks the call at
// event (PreToolUse, PermissionRequest), or a 200 with a systemMessage at
// the other events, whose reason contains each of want.
func denied(t *testing.T, event string, status int, body string, want ...string) {
	t.Helper()
	require.Equal(t, http.StatusOK, status, "Claude Code runs the call on any other status: %s", body)
	var a hookAnswer
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	var reason string
	switch event {
	case "PreToolUse":
		assert.Equal(t, "PreToolUse", a.HookSpecificOutput.HookEventName, body)
		assert.Equal(t, "deny", a.HookSpecificOutput.PermissionDecision, body)
		reason = a.HookSpecificOutput.PermissionDecisionReason
	case "PermissionRequest":
		assert.Equal(t, "PermissionRequest", a.HookSpecificOutput.HookEventName, body)
		assert.Equal(t, "deny", a.HookSpecificOutput.Decision.Behavior, body)
		reason = a.HookSpecificOutput.Decision.Message
	default:
		assert.Empty(t, a.HookSpecificOutput.HookEventName, body)
		reason = a.SystemMessage
	}
	for _, w := range want {
		assert.Contains(t, reason, w, body)
	}
}

// Without a valid credential the hooks block the call, in Claude Code's own
// answer, saying how to give the hook its token; nothing is submitted.
func TestClaudeCodeHTTPHook_WithoutAValidTokenDenies(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	post := func(authorization, path, body string) (int, string) {
		status, answer, err := postHookWith(t.Context(), t, g, authorization, path, body)
		require.NoError(t, err)
		return status, answer
	}
	for authorization, want := range map[string][]string{
		"Bearer ":                       {"sent no bearer token", "allowedEnvVars", "docs/claude-code.md"}, // allowedEnvVars missing: Claude Code sends this
		"":                              {"sent no bearer token", "allowedEnvVars", "docs/claude-code.md"},
		"Bearer not-a-token-0000000001": {"not one toolgate knows", "allowedEnvVars", "docs/claude-code.md"},
		"Bearer viewer-token-00000001":  {"vic may not POST", "agent"},
	} {
		status, body := post(authorization, "pre-tool-use", preToolUse("unauthenticated", "rm -rf /", "toolu_pre"))
		denied(t, "PreToolUse", status, body, want...)
		status, body = post(authorization, "permission-request", permissionRequest("unauthenticated", "rm -rf /"))
		denied(t, "PermissionRequest", status, body, want...)
		status, body = post(authorization, "post-tool-use", `{"session_id":"unauthenticated","hook_event_name":"PostToolUse","tool_name":"Bash",`+
			`"tool_input":{"command":"rm -rf /"},"tool_use_id":"toolu_pre","tool_response":{}}`)
		denied(t, "PostToolUse", status, body, want...)
	}
	assert.Empty(t, sessionCalls(t, g, "unauthenticated"), "no decision is recorded for nobody")

	// The rest of the API refuses as ever.
	req, err := http.NewRequestWithContext(t.Context(), "POST", g.HTTPURL+"/v1/tool-calls", bytes.NewBufferString(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer ")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// A hook sent under a Host header the server does not answer to (a
// misconfigured URL) is denied, as any refusal of a hook, not answered 421,
// which Claude Code would take as leave to run the call.
func TestClaudeCodeHTTPHook_AWrongHostDenies(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	req, err := http.NewRequestWithContext(t.Context(), "POST", g.HTTPURL+"/v1/integrations/claude-code/pre-tool-use", bytes.NewBufferString(preToolUse("wrong-host", "rm -rf /", "toolu_1")))
	require.NoError(t, err)
	req.Host = "toolgate.example.com"
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	denied(t, "PreToolUse", resp.StatusCode, string(body), "does not answer to the host", "--allowed-hosts")
}

// A request the hooks cannot take is answered with a block saying why, in
// the shape of the event its body names (else its path's), never with an
// error status, which Claude Code would take as leave to run the call.
func TestClaudeCodeHTTPHook_RefusesABadRequestWithABlock(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	for query, want := range map[string]string{
		"?wait=10m":             "at most 20s", // the default timeout is an HTTP hook's 30s
		"?wait=600&timeout=600": "at most 9m50s",
		"?wait=soon":            "want seconds (600) or a duration (10m) (?wait=)",
	} {
		status, body, err := postHook(t.Context(), t, g, "permission-request"+query, permissionRequest("http-bad", "git push"))
		require.NoError(t, err)
		denied(t, "PermissionRequest", status, body, want)
	}
	for _, c := range []struct{ path, body, event, want string }{
		{"pre-tool-use?team=" + strings.Repeat("t", 2000), preToolUse("http-bad", "rm -rf /", "toolu_1"), "PreToolUse", "team: at most 1024 bytes"},
		{"pre-tool-use", `{"hook_event_name":"PreToolUse","tool_name":"Bash"}`, "PreToolUse", "session_id: required"},
		{"pre-tool-use", `not json`, "PreToolUse", "request body"},
		{"pre-tool-use", permissionRequest("http-bad", "git push"), "PermissionRequest", `"PermissionRequest" does not belong at /v1/integrations/claude-code/pre-tool-use`},
		{"pretooluse", preToolUse("http-bad", "rm -rf /", "toolu_1"), "PreToolUse", "no such Claude Code hook here"},
		{"session-start", `{"session_id":"http-bad","hook_event_name":"SessionStart"}`, "SessionStart", "no such Claude Code hook here"},
	} {
		status, body, err := postHook(t.Context(), t, g, c.path, c.body)
		require.NoError(t, err)
		denied(t, c.event, status, body, c.want)
	}
	assert.Empty(t, sessionCalls(t, g, "http-bad"), "nothing was submitted")
}

// The HTTP hooks' PostToolUse finds the call a PermissionRequest made.
func TestClaudeCodeHTTPHook_PostToolUseSettlesThePermissionRequestsCall(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	status, body, err := postHook(t.Context(), t, g, "permission-request", permissionRequest("http-post", "npm test"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	var answer struct {
		HookSpecificOutput struct {
			Decision struct{ Behavior string } `json:"decision"`
		} `json:"hookSpecificOutput"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer))
	require.Equal(t, "allow", answer.HookSpecificOutput.Decision.Behavior, body)

	status, body, err = postHook(t.Context(), t, g, "post-tool-use", `{"session_id":"http-post","hook_event_name":"PostToolUse","tool_name":"Bash",`+
		`"tool_input":{"command":"npm test"},"tool_use_id":"toolu_01ABC","tool_response":{"stdout":"ok"}}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	all := sessionCalls(t, g, "http-post")
	require.Len(t, all, 1)
	assert.Equal(t, machine.StateCompletedSuccess, all[0].Status)
	assert.JSONEq(t, `{"stdout":"ok"}`, string(all[0].Result))
}

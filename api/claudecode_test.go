package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
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
	req, err := http.NewRequestWithContext(ctx, "POST", g.HTTPURL+"/v1/integrations/claude-code/"+pathAndQuery, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-token-000000001")
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

func TestClaudeCodeHTTPHook_RefusesAWaitItsTimeoutDoesNotAllow(t *testing.T) {
	t.Parallel()
	g := hookServer(t)
	for query, want := range map[string]string{
		"?wait=10m":             "at most 20s", // the default timeout is an HTTP hook's 30s
		"?wait=600&timeout=600": "at most 9m50s",
		"?wait=soon":            "want seconds (600) or a duration (10m) (?wait=)",
	} {
		status, body, err := postHook(t.Context(), t, g, "permission-request"+query, permissionRequest("http-bad", "git push"))
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, status, query)
		assert.Contains(t, body, want, query)
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

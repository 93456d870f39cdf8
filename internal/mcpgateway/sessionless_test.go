package mcpgateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// postSessionless sends one JSON-RPC request over streamable HTTP on
// 2026-07-28 (its headers as the revision has them) and returns its
// result, read from JSON or from the event stream.
func postSessionless(t *testing.T, url string, id int, method string, params map[string]any) map[string]any {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		var msg map[string]any
		if json.Unmarshal([]byte(line), &msg) == nil && msg["id"] != nil {
			res, ok := msg["result"].(map[string]any)
			require.True(t, ok, "%s: %v", method, msg)
			return res
		}
	}
	t.Fatalf("%s: no response (HTTP %d)", method, resp.StatusCode)
	return nil
}

// TestGateway_2026OverHTTP: over streamable HTTP the gateway serves
// 2026-07-28 as on stdio, beside the revisions before it: server/discover
// offers it, the lists carry valid caching hints (never "cacheScope": ""),
// a call is held or, declaring the tasks extension, answered with a task;
// the client's requests, each on its own, are one conversation, and share
// the stdio server's process.
func TestGateway_2026OverHTTP(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		gw.Close()
		srv.Close()
	})

	found := postSessionless(t, srv.URL, 1, "server/discover", stateless(nil, withTasks))
	assert.Contains(t, found["supportedVersions"], "2026-07-28", "%v", found)
	assert.Contains(t, found["supportedVersions"], "2025-11-25", "%v", found)

	list := postSessionless(t, srv.URL, 2, "tools/list", stateless(nil, map[string]any{}))
	assert.Equal(t, "private", list["cacheScope"], "the list is the policy's for this client: %v", list)
	assert.Len(t, list["tools"], 4)

	held := postSessionless(t, srv.URL, 3, "tools/call", stateless(map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}}, map[string]any{}))
	assert.Equal(t, "echo: hi", held["content"].([]any)[0].(map[string]any)["text"], "%v", held)

	task := postSessionless(t, srv.URL, 4, "tools/call", stateless(map[string]any{"name": "write_file", "arguments": map[string]any{"path": "h.txt"}}, withTasks))
	require.Equal(t, "task", task["resultType"], "%v", task)
	id := task["taskId"].(string)
	_, err := e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: id, Approved: true})
	require.NoError(t, err)
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the task completes", func() (bool, any) {
		got := postSessionless(t, srv.URL, 5, "tasks/get", stateless(map[string]any{"taskId": id}, withTasks))
		return got["status"] == "completed", got
	})

	echo := e.only("mcp__files__echo", machine.StateCompletedSuccess)
	write := e.only("mcp__files__write_file", machine.StateCompletedSuccess)
	assert.True(t, strings.HasPrefix(echo.ConversationID, "stateless-"), echo.ConversationID)
	assert.Equal(t, echo.ConversationID, write.ConversationID, "one client's requests are one conversation")
	calls := e.received()
	require.Len(t, calls, 2)
	assert.Equal(t, calls[0].PID, calls[1].PID, "the requests share the stdio server's process")
}

// withSessions has the SDK's client speak the latest revision with HTTP
// sessions (it would speak 2026-07-28, which has none).
var withSessions = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

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

	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/machine"
)

// TestGateway_AToolThatNeverAnswersEndsAtTheCallsDeadline: a call whose
// server never answers is answered before the client's timeout with an
// error it can read, and toolgate records why it failed.
func TestGateway_AToolThatNeverAnswersEndsAtTheCallsDeadline(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{Timeout: 4 * time.Second})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		gw.Close()
		srv.Close()
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "patient", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })

	began := time.Now()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}})
	require.NoError(t, err)
	assert.Less(t, time.Since(began), 4*time.Second, "answered before the client's timeout")
	assert.True(t, res.IsError)
	const why = "MCP server files did not answer by the call's deadline, 3s after the client asked (its timeout, 4s, less the time to answer it)"
	assert.Contains(t, text(t, res), why)
	failed := e.only("mcp__files__hang", machine.StateCompletedFailure)
	assert.Contains(t, failed.Error, why, "toolgate records why")
}

// sse is one event of a stream.
type sse struct{ id, data string }

// events reads a response's event stream until it ends.
func events(t *testing.T, resp *http.Response) []sse {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var out []sse
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			out = append(out, cur)
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// TestGateway_AStreamResumesWithLastEventID: over streamable HTTP a call's
// response stream carries event ids, starting with one at once (before the
// call is answered), and a client that reconnects with Last-Event-ID is
// sent what followed it: the call's answer.
func TestGateway_AStreamResumesWithLastEventID(t *testing.T) {
	t.Parallel()
	e := start(t)
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		gw.Close()
		srv.Close()
	})
	init, sid := post(t, srv.URL, "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "resumer", "version": "1"}}})
	require.NotNil(t, init["result"], "%v", init)
	post(t, srv.URL, sid, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})

	request := func(method string, body []byte, header map[string]string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Mcp-Session-Id", sid)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	call, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": "echo", "arguments": map[string]any{"text": "again"}}})
	require.NoError(t, err)
	got := events(t, request(http.MethodPost, call, nil))
	require.GreaterOrEqual(t, len(got), 2, "%v", got)
	assert.NotEmpty(t, got[0].id, "the stream starts with an event id: %v", got)
	assert.Empty(t, got[0].data, "which carries no message: %v", got)
	assert.Contains(t, got[len(got)-1].data, "echo: again")

	replayed := events(t, request(http.MethodGet, nil, map[string]string{"Last-Event-ID": got[0].id}))
	require.NotEmpty(t, replayed, "a reconnection after the first event is sent the rest")
	assert.Contains(t, replayed[len(replayed)-1].data, "echo: again", "%v", replayed)
	assert.Equal(t, got[len(got)-1].id, replayed[len(replayed)-1].id)
}

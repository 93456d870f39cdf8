package mcpgateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// mortal is an MCP client's HTTP side that can die: kill drops every
// connection it opened, as a client process's exit does, and it opens
// none after.
type mortal struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func (m *mortal) httpClient() *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.dead {
			return nil, errors.New("the client is dead")
		}
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			m.conns = append(m.conns, c)
		}
		return c, err
	}}}
}

func (m *mortal) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = true
	for _, c := range m.conns {
		_ = c.Close()
	}
}

// gauge reads a gauge of the gateway's /metrics at url.
func gauge(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no %s in %s/metrics", name, url)
	return 0
}

// alive reports whether the process pid runs.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestGateway_HTTPSessionsEndWhenTheirClientsDie: five HTTP clients die
// (their connections drop, nothing sends DELETE) while each waits on a
// call. Their calls are withdrawn at once; their sessions, idle from then
// on, end after the idle timeout on the gateway's clock, and their
// upstream server processes with them. A sixth client, whose call still
// waits on its open request, is not idle: its session outlives them.
func TestGateway_HTTPSessionsEndWhenTheirClientsDie(t *testing.T) {
	t.Parallel()
	e := start(t)
	clock := toolgatetest.FixedClock(time.Now())
	gw := e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{Clock: clock.Now})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		gw.Close()
		srv.Close()
	})

	connect := func(name string, m *mortal) *mcp.ClientSession {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: m.httpClient()}, withSessions)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": name}})
		require.NoError(t, err)
		require.Equal(t, "echo: "+name, text(t, res))
		return cs
	}
	const n = 5
	clients := make([]*mortal, n)
	waiting := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("dies-%d", i)
		clients[i] = &mortal{}
		cs := connect(name, clients[i])
		callAsync(t.Context(), cs, "write_file", map[string]any{"path": name})
		waiting[e.pendingIn(name).PendingID] = true
	}
	survivor := connect("lives", &mortal{})
	answered := callAsync(t.Context(), survivor, "write_file", map[string]any{"path": "lives"})
	lives := e.pendingIn("lives")

	pids := map[int]bool{}
	for _, c := range e.received() {
		pids[c.PID] = true
	}
	require.Len(t, pids, n+1, "one upstream process per session")
	assert.Equal(t, float64(n+1), gauge(t, srv.URL, "toolgate_gateway_sessions"))
	assert.Equal(t, float64(n+1), gauge(t, srv.URL, "toolgate_gateway_upstream_processes"))

	for _, m := range clients {
		m.kill()
	}
	for id := range waiting {
		e.ends(id, machine.StateCancelled, "withdrawn: the MCP client disconnected")
	}
	assert.Equal(t, float64(n+1), gauge(t, srv.URL, "toolgate_gateway_sessions"), "a session without a request is not ended before the idle timeout")

	clock.Skip(mcpgateway.DefaultIdleTimeout + time.Second)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the dead clients' sessions and upstream processes end", func() (bool, any) {
		sessions := gauge(t, srv.URL, "toolgate_gateway_sessions")
		processes := gauge(t, srv.URL, "toolgate_gateway_upstream_processes")
		var running []int
		for pid := range pids {
			if alive(pid) {
				running = append(running, pid)
			}
		}
		return sessions == 1 && processes == 1 && len(running) == 1, fmt.Sprintf("sessions %v, processes %v, running %v", sessions, processes, running)
	})

	// The survivor's call waited through it all, and runs when approved.
	c, err := e.approver.Get(t.Context(), lives.PendingID)
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, c.Status, c.StatusReason)
	_, err = e.approver.Decide(t.Context(), wire.DecideRequest{PendingID: lives.PendingID, Approved: true})
	require.NoError(t, err)
	a := await(t, answered)
	require.NoError(t, a.err)
	assert.Equal(t, "wrote lives", text(t, a.res))
}

// TestGateway_UpstreamThatCannotStartIsAnInternalError: a server whose
// command does not exist fails what needs it with JSON-RPC's internal
// error, saying why.
func TestGateway_UpstreamThatCannotStartIsAnInternalError(t *testing.T) {
	t.Parallel()
	e := start(t)
	missing := filepath.Join(t.TempDir(), "no-such-server")
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": {Command: mcpgateway.Argv{missing}}}, mcpgateway.Options{}), "missing-test", nil)
	_, err := cs.ListTools(t.Context(), nil)
	var rpcErr *jsonrpc.Error
	require.ErrorAs(t, err, &rpcErr)
	assert.Equal(t, int64(jsonrpc.CodeInternalError), rpcErr.Code)
	assert.Contains(t, rpcErr.Message, "MCP server files: ")
	assert.Contains(t, rpcErr.Message, missing)
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo"})
	require.ErrorAs(t, err, &rpcErr)
	assert.Equal(t, int64(jsonrpc.CodeInternalError), rpcErr.Code)
	assert.Empty(t, e.calls("mcp__files__echo"), "nobody is asked about a call no server can take")
}

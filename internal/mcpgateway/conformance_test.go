package mcpgateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
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

	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/internal/mcpgateway/npmtest"
	"github.com/toolgate/toolgate/toolgatetest"
)

// allowAll lets every tool run at once.
const allowAll = `
default:
  rules:
    allow: ["mcp__conformance"]
`

// TestConformance_ScenariosPassThroughTheGateway runs the official MCP
// conformance suite's server scenarios (@modelcontextprotocol/conformance,
// active and pending) against npmtest/node/server.mjs, a server
// written with the official TypeScript SDK, first directly and then
// through the gateway over streamable HTTP, with the server behind it on
// streamable HTTP and on stdio: every check that passes directly passes
// through the gateway, and no scenario fails through it that passes
// directly.
func TestConformance_ScenariosPassThroughTheGateway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := npmtest.Install(ctx, t)
	node := npmtest.Node(dir)
	server := filepath.Join(dir, "server.mjs")

	url := startConformanceServer(ctx, t, node, server)
	direct := runConformance(ctx, t, dir, url)
	require.NotEmpty(t, direct, "the suite ran no scenario")

	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: allowAll})
	_, agent := g.ConnectAs(t, "agent")
	for _, c := range []struct {
		name     string
		upstream mcpgateway.Upstream
	}{
		{"HTTP", mcpgateway.Upstream{URL: url}},
		{"stdio", mcpgateway.Upstream{Command: mcpgateway.Argv{node, server, "--stdio"}, Dir: dir,
			Env: map[string]string{"NODE_COMPILE_CACHE": filepath.Join(dir, ".node-compile-cache")}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw, err := mcpgateway.New(&mcpgateway.Config{Servers: map[string]mcpgateway.Upstream{"conformance": c.upstream}}, agent,
				mcpgateway.Options{Timeout: 30 * time.Second, Stderr: testWriter{t}})
			require.NoError(t, err)
			gwURL := serveLoopback(t, gw)
			through := runConformance(ctx, t, dir, gwURL)
			compareConformance(t, direct, through)
		})
	}

	// A client that never sets a log level hears the messages the server
	// sends as it sends them, on the stream of the call they are about.
	t.Run("LogsBeforeSetLevel", func(t *testing.T) {
		gw, err := mcpgateway.New(&mcpgateway.Config{Servers: map[string]mcpgateway.Upstream{"conformance": {URL: url}}}, agent, mcpgateway.Options{})
		require.NoError(t, err)
		var mu sync.Mutex
		var logs []any
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "quiet", Version: "1"}, &mcp.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
				mu.Lock()
				logs = append(logs, r.Params.Data)
				mu.Unlock()
			},
		}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: serveLoopback(t, gw), DisableStandaloneSSE: true}, withSessions)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_tool_with_logging", Arguments: map[string]any{}})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []any{"Tool execution started", "Tool processing data", "Tool execution completed"}, logs,
			"the call's log messages, on its own stream (the client opened no other), before its answer")
	})
}

// check is one check of a scenario, as the suite records it.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// compareConformance fails t for every check that passed directly and not
// through the gateway, and every scenario that failed through it and not
// directly, printing each scenario's checks when one did.
func compareConformance(t *testing.T, direct, through map[string][]check) {
	t.Helper()
	var bad []string
	for _, scenario := range slices.Sorted(maps.Keys(direct)) {
		want, got := status(direct[scenario]), status(through[scenario])
		var wrong []string
		for _, id := range slices.Sorted(maps.Keys(got)) {
			if got[id] == "FAILURE" && want[id] != "FAILURE" || want[id] == "SUCCESS" && got[id] != "SUCCESS" {
				wrong = append(wrong, fmt.Sprintf("%s: %q directly, %q through the gateway", id, want[id], got[id]))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(want)) {
			if _, ok := got[id]; !ok && want[id] == "SUCCESS" {
				wrong = append(wrong, fmt.Sprintf("%s: %q directly, not checked through the gateway", id, want[id]))
			}
		}
		if len(through[scenario]) == 0 {
			wrong = append(wrong, "no checks through the gateway")
		}
		if len(wrong) > 0 {
			bad = append(bad, fmt.Sprintf("%s:\n  %s\n  through the gateway: %s", scenario, strings.Join(wrong, "\n  "), failing(through[scenario])))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d scenarios differ through the gateway:\n%s", len(bad), len(direct), strings.Join(bad, "\n"))
	}
}

// status is each check's worst status, by id (an id may recur: the suite's
// INFO records of what was sent and received).
func status(checks []check) map[string]string {
	rank := map[string]int{"": 0, "INFO": 1, "SUCCESS": 2, "WARNING": 3, "FAILURE": 4}
	out := map[string]string{}
	for _, c := range checks {
		if rank[c.Status] > rank[out[c.ID]] {
			out[c.ID] = c.Status
		}
	}
	return out
}

func failing(checks []check) string {
	var parts []string
	for _, c := range checks {
		if c.Status == "INFO" {
			continue
		}
		s := c.ID + " " + c.Status
		if c.ErrorMessage != "" {
			s += " (" + c.ErrorMessage + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// runConformance runs every server scenario of the suite, active and
// pending, in one invocation against url, and returns each scenario's
// checks, by name.
func runConformance(ctx context.Context, t *testing.T, dir, url string) map[string][]check {
	t.Helper()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, npmtest.Node(dir),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", url, "--suite", "all", "-o", out)
	cmd.Dir = dir
	cmd.Env = npmtest.Env(dir)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.WaitDelay = 5 * time.Second
	began := time.Now()
	// The suite exits 1 when a check fails: the checks say which.
	if err := cmd.Run(); err != nil && ctx.Err() != nil {
		t.Fatalf("conformance against %s: %v (%v)\n%s", url, err, ctx.Err(), log.String())
	}
	t.Logf("conformance against %s ran in %s", url, time.Since(began).Round(time.Millisecond))
	results, err := filepath.Glob(filepath.Join(out, "server-*", "checks.json"))
	require.NoError(t, err)
	require.NotEmpty(t, results, "the suite recorded no results:\n%s", log.String())
	scenarios := map[string][]check{}
	for _, path := range results {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var checks []check
		require.NoError(t, json.Unmarshal(data, &checks), path)
		// server-<scenario>-<timestamp>, the timestamp as 2026-01-02T03-04-05-678Z
		base := filepath.Base(filepath.Dir(path))
		scenarios[base[len("server-"):len(base)-len("-2026-01-02T03-04-05-678Z")]] = checks
	}
	return scenarios
}

// startConformanceServer starts the test server on streamable HTTP and
// returns its URL.
func startConformanceServer(ctx context.Context, t *testing.T, node, server string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, server, "--port", "0")
	cmd.Dir = filepath.Dir(server)
	cmd.Env = npmtest.Env(cmd.Dir)
	cmd.Stderr = testWriter{t}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "the conformance server said nothing: %v", sc.Err())
	url, ok := strings.CutPrefix(sc.Text(), "listening ")
	require.True(t, ok, "the conformance server said %q", sc.Text())
	go func() {
		for sc.Scan() {
			t.Log(sc.Text())
		}
	}()
	return url
}

// serveLoopback serves gw's streamable HTTP on a loopback port, as
// `toolgate mcp-gateway --http` does, and returns its URL (named
// localhost: the suite's DNS rebinding checks want it so).
func serveLoopback(t *testing.T, gw *mcpgateway.Gateway) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		gw.Close()
		_ = srv.Close()
	})
	return fmt.Sprintf("http://localhost:%d/mcp", l.Addr().(*net.TCPAddr).Port)
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

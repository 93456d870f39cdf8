package mcpgateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/mcpgateway"
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
// active and pending) against testdata/conformance/server.mjs, a server
// written with the official TypeScript SDK, first directly and then
// through the gateway over streamable HTTP, with the server behind it on
// streamable HTTP and on stdio: every check that passes directly passes
// through the gateway, and no scenario fails through it that passes
// directly.
func TestConformance_ScenariosPassThroughTheGateway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := installConformance(ctx, t)
	node := filepath.Join(dir, "node_modules", ".bin", "node")
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
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "node"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", url, "--suite", "all", "-o", out)
	cmd.Dir = dir
	cmd.Env = nodeEnv(dir)
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
	cmd.Env = nodeEnv(cmd.Dir)
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

// nodeEnv is the environment of the Node processes the test starts, which
// keep the code they compile in dir: a process after the first starts in
// less CPU, which the gateway's sessions on stdio (a server process each)
// add up.
func nodeEnv(dir string) []string {
	return append(os.Environ(), "NODE_COMPILE_CACHE="+filepath.Join(dir, ".node-compile-cache"))
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// installConformance installs testdata/conformance's locked packages (the
// suite, the TypeScript SDK and the Node they run on) with npm ci into a
// directory of the user's cache named for the lock, when npm's record of
// what it installed there (node_modules/.package-lock.json) is not the
// lock's, and copies the test server beside them. Test processes install
// one at a time.
func installConformance(ctx context.Context, t *testing.T) string {
	t.Helper()
	src := filepath.Join("testdata", "conformance")
	lockFile, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	require.NoError(t, err)
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	sum := sha256.Sum256(lockFile)
	dir := filepath.Join(cache, "toolgate-test", "mcp-conformance-"+hex.EncodeToString(sum[:8]))
	require.NoError(t, os.MkdirAll(dir, 0o755))

	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	for _, f := range []string{"package.json", "package-lock.json", "server.mjs"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o644))
	}
	if !installedMatchesLock(t, dir) {
		npm, err := exec.LookPath("npm")
		require.NoError(t, err, "the conformance test needs npm (apt-get install -y nodejs npm; .ci/run installs them)")
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci in %s:\n%s", dir, out)
		require.True(t, installedMatchesLock(t, dir), "npm ci left node_modules/.package-lock.json unlike package-lock.json")
	}
	return dir
}

// installedMatchesLock reports whether dir's node_modules/.package-lock.json
// lists exactly the packages its package-lock.json locks (its root entry
// aside).
func installedMatchesLock(t *testing.T, dir string) bool {
	t.Helper()
	read := func(path string) (map[string]any, bool) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, false
		}
		var l struct {
			Packages map[string]any `json:"packages"`
		}
		require.NoError(t, json.Unmarshal(data, &l), path)
		delete(l.Packages, "")
		return l.Packages, true
	}
	want, ok := read(filepath.Join(dir, "package-lock.json"))
	require.True(t, ok, "package-lock.json is missing")
	got, ok := read(filepath.Join(dir, "node_modules", ".package-lock.json"))
	return ok && reflect.DeepEqual(want, got)
}

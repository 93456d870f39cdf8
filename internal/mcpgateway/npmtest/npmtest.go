// Package npmtest installs, for the MCP gateway's tests, the npm packages
// they run, locked in node/package-lock.json: the official MCP
// conformance suite, the TypeScript SDK (and the Node they run on), the
// published schemas of MCP's tasks (@modelcontextprotocol/ext-tasks) and
// MCP Inspector; beside them the scripts in node/: the suite's test
// server (server.mjs), a client of the SDK's task API (tasks-client.mjs)
// and a validator of messages against the tasks' schemas
// (tasks-schemas.mjs).
package npmtest

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

//go:embed node/package.json node/package-lock.json node/*.mjs
var files embed.FS

// Install installs the locked packages with npm ci into a directory of
// the user's cache named for the lock, when npm's record of what it
// installed there (node_modules/.package-lock.json) is not the lock's,
// writes the scripts beside them, and returns the directory. Test
// processes install one at a time.
func Install(ctx context.Context, t testing.TB) string {
	t.Helper()
	lockFile, err := files.ReadFile("node/package-lock.json")
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
	entries, err := fs.ReadDir(files, "node")
	require.NoError(t, err)
	for _, e := range entries {
		data, err := files.ReadFile("node/" + e.Name())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644))
	}
	if !installedMatchesLock(t, dir) {
		npm, err := exec.LookPath("npm")
		require.NoError(t, err, "the MCP tests need npm (apt-get install -y nodejs npm; .ci/run installs them)")
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci in %s:\n%s", dir, out)
		require.True(t, installedMatchesLock(t, dir), "npm ci left node_modules/.package-lock.json unlike package-lock.json")
	}
	return dir
}

// Node is the Node the packages installed in dir run on.
func Node(dir string) string { return filepath.Join(dir, "node_modules", ".bin", "node") }

// Env is the environment of the Node processes a test starts from dir,
// which keep the code they compile there: a process after the first
// starts in less CPU, which the gateway's sessions on stdio (a server
// process each) add up.
func Env(dir string) []string {
	return append(os.Environ(), "NODE_COMPILE_CACHE="+filepath.Join(dir, ".node-compile-cache"))
}

// installedMatchesLock reports whether dir's node_modules/.package-lock.json
// lists the packages its package-lock.json locks (its root entry aside),
// as locked, but for optional ones npm left out (another platform's
// builds).
func installedMatchesLock(t testing.TB, dir string) bool {
	t.Helper()
	read := func(path string) (map[string]map[string]any, bool) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, false
		}
		var l struct {
			Packages map[string]map[string]any `json:"packages"`
		}
		require.NoError(t, json.Unmarshal(data, &l), path)
		delete(l.Packages, "")
		return l.Packages, true
	}
	want, ok := read(filepath.Join(dir, "package-lock.json"))
	require.True(t, ok, "package-lock.json is missing")
	got, ok := read(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if !ok {
		return false
	}
	for name, p := range want {
		if q, ok := got[name]; ok && !reflect.DeepEqual(p, q) || !ok && p["optional"] != true {
			return false
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			return false
		}
	}
	return true
}

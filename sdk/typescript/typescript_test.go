// Package typescript tests the TypeScript SDK (@toolgate/client) against a
// real toolgate: it installs the package's locked dependencies (npm ci,
// only when node_modules does not hold what package-lock.json locks),
// builds it with tsc, and runs its tests (node --test) under the Node its
// own dev dependencies bring, with the toolgate CLI for the approvals.
// The package's npm test builds it and runs this test.
package typescript

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/toolgatetest"
)

// policy is what the TypeScript tests meet: send_email, transfer_funds,
// publish_post (the agents run these themselves) and deploy_service (an
// executor runs it) ask a person, delete_repo is denied, everything else
// runs at once. One conversation's calls wait 1.5 s for a person.
const policy = `default:
  requiresApprovalTools: [send_email, transfer_funds, publish_post, deploy_service]
  approvalTimeoutMs: 300000
  rules:
    deny: ["delete_repo"]
conversations:
  ts-gate-expiring: {approvalTimeoutMs: 1500}
`

// TestTypeScript_SDKAgainstToolgate runs the package's tests (test/*.test.ts)
// against one toolgate with the policy above: they submit, wait, decide
// through the CLI, run executors and the AI SDK's agent loop with its mock
// model, and check the entries toolgate ends with.
func TestTypeScript_SDKAgainstToolgate(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "the TypeScript SDK's test needs npm (apt-get install -y nodejs npm; .ci/run installs them)")

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// Two test processes in one checkout (go test ./... run twice at
	// once) install and build one at a time.
	unlock := lockPackage(t)
	installed := time.Now()
	installModules(ctx, t, npm)
	t.Logf("node_modules ready in %s", time.Since(installed).Round(time.Millisecond))

	// The Node the package's dev dependencies bring: AI SDK 7 needs 22 or later.
	node, err := filepath.Abs(filepath.Join("node_modules", ".bin", "node"))
	require.NoError(t, err)
	built := time.Now()
	if stale(t) {
		build(ctx, t, node)
	}
	t.Logf("built in %s", time.Since(built).Round(time.Millisecond))
	unlock()

	bin := filepath.Join(t.TempDir(), "toolgate")
	run(ctx, t, exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/toolgate"))

	g := toolgatetest.Start(t, toolgatetest.Options{Policy: policy})
	tests, err := filepath.Glob(filepath.Join("dist", "test", "*.test.js"))
	require.NoError(t, err)
	require.NotEmpty(t, tests, "tsc built no tests into dist/test")
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-concurrency=" + concurrency(len(tests)), "--test-reporter=spec"}, tests...)...)
	// Nothing of the caller's environment chooses toolgate or a credential.
	cmd.Env = append(os.Environ(),
		"TOOLGATE_TEST_NATS="+g.NATSURL,
		"TOOLGATE_TEST_DATA="+g.Data,
		"TOOLGATE_TEST_HTTP="+g.HTTPURL,
		"TOOLGATE_TEST_BIN="+bin,
		"TOOLGATE_TEST_SCHEMA="+mustAbs(t, filepath.Join("..", "..", "wire", "event.schema.json")),
		"NATS_URL=", "NATS_CREDS=", "NATS_CONTEXT=", "XDG_CONFIG_HOME="+t.TempDir(),
	)
	ran := time.Now()
	run(ctx, t, cmd)
	t.Logf("node --test ran in %s", time.Since(ran).Round(time.Millisecond))
}

// build runs tsc. A build that fails leaves its record (which tsc writes
// all the same) older than anything, so that the next run builds again
// and fails again rather than run what tsc emitted.
func build(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	record := filepath.Join("dist", ".tsbuildinfo")
	built := false
	defer func() {
		if !built {
			_ = os.Chtimes(record, time.Unix(0, 0), time.Unix(0, 0))
		}
	}()
	run(ctx, t, exec.CommandContext(ctx, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "."))
	// tsc leaves its record as it was when nothing changed: the build is
	// as new as this run of it.
	now := time.Now()
	require.NoError(t, os.Chtimes(record, now, now))
	built = true
}

// concurrency runs the test files all at once: each mostly waits on
// toolgate.
func concurrency(files int) string { return strconv.Itoa(max(files, runtime.NumCPU())) }

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}

// run runs cmd in this directory and fails the test with its output if it
// fails.
func run(ctx context.Context, t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if testing.Verbose() || err != nil {
		t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out.String())
	}
	require.NoError(t, err, "%s (context: %v)", strings.Join(cmd.Args, " "), ctx.Err())
}

// lockPackage takes a lock, a file in the temporary directory named for
// this directory, that one test process holds at a time, and returns its
// release.
func lockPackage(t *testing.T) func() {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "toolgate-npm-"+strings.NewReplacer("/", "_", "\\", "_", ":", "_").Replace(dir)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	var once sync.Once
	release := func() {
		once.Do(func() {
			_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			_ = lock.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// installModules runs npm ci when node_modules does not hold what
// package-lock.json locks: npm's record of what it installed
// (node_modules/.package-lock.json) lists every package of the lock but
// the root, as the lock does.
func installModules(ctx context.Context, t *testing.T, npm string) {
	t.Helper()
	if installedMatchesLock(t) {
		return
	}
	run(ctx, t, exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund"))
	require.True(t, installedMatchesLock(t), "npm ci left node_modules/.package-lock.json unlike package-lock.json")
}

// installedMatchesLock reports whether node_modules/.package-lock.json
// lists exactly the packages package-lock.json locks (its root entry
// aside).
func installedMatchesLock(t *testing.T) bool {
	t.Helper()
	type lockFile struct {
		Packages map[string]json.RawMessage `json:"packages"`
	}
	read := func(path string) (map[string]any, bool) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, false
		}
		var l lockFile
		require.NoError(t, json.Unmarshal(data, &l), path)
		out := map[string]any{}
		for k, v := range l.Packages {
			if k == "" {
				continue
			}
			var x any
			require.NoError(t, json.Unmarshal(v, &x), "%s: %s", path, k)
			out[k] = x
		}
		return out, true
	}
	want, ok := read("package-lock.json")
	require.True(t, ok, "package-lock.json is missing")
	got, ok := read(filepath.Join("node_modules", ".package-lock.json"))
	return ok && reflect.DeepEqual(want, got)
}

// stale reports whether the build (dist/, which tsc records in
// dist/.tsbuildinfo) is older than anything it is built from: the
// sources, tests and examples, the compiler's configuration and the
// locked dependencies. A build that is not is used as it is, which spares
// a loaded machine tsc's seconds.
func stale(t *testing.T) bool {
	t.Helper()
	info, err := os.Stat(filepath.Join("dist", ".tsbuildinfo"))
	if err != nil {
		return true
	}
	newer := false
	for _, root := range []string{"src", "test", "examples", "tsconfig.json", "package.json", "package-lock.json", filepath.Join("node_modules", ".package-lock.json")} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if fi, err := d.Info(); err == nil && !fi.ModTime().Before(info.ModTime()) {
				newer = true
			}
			return nil
		})
		require.NoError(t, err)
	}
	return newer
}

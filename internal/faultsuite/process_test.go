package faultsuite

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
)

// binDir holds the programs the tests run, each built once per test run.
var binDir string

func TestMain(m *testing.M) {
	// The processes inherit the environment: none may find a user's
	// config file, NATS context or server.
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(os.TempDir(), fmt.Sprintf("toolgate-test-no-config-%d", os.Getpid())))
	for _, v := range []string{"NATS_URL", "NATS_CREDS", "NATS_CONTEXT", "TOOLGATE_CONFIG"} {
		os.Unsetenv(v)
	}
	var err error
	if binDir, err = os.MkdirTemp("", "toolgate-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var (
	// toolgateBinary is cmd/toolgate.
	toolgateBinary = built("toolgate", "github.com/toolgate/toolgate/cmd/toolgate")
	// natsServerBinary is nats-server's own main, at the version in go.mod.
	natsServerBinary = built("nats-server", "github.com/nats-io/nats-server/v2")
)

// built returns the path of the Go program pkg, built into binDir as name
// by the first test that asks for it.
func built(name, pkg string) func(testing.TB) string {
	build := sync.OnceValues(func() (string, error) {
		bin := filepath.Join(binDir, name)
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	})
	return func(t testing.TB) string {
		t.Helper()
		bin, err := build()
		require.NoError(t, err)
		return bin
	}
}

// process is a running `toolgate serve`.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}

	logMu sync.Mutex
	log   strings.Builder // its stderr so far
}

// output is what the process has written to stderr so far.
func (p *process) output() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

// startServe starts `toolgate serve` and waits until it says it is serving.
func startServe(t *testing.T, args ...string) *process {
	t.Helper()
	// One with its own embedded server is remembered, so that the test
	// and the processes that join it find its credentials; one that
	// joins another connects with that one's own.
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "--") {
			flags[args[i]] = args[i+1]
		}
	}
	if data, ok := flags["--data"]; ok && flags["--nats"] == "" {
		servetest.Remember(t, "nats://"+flags["--listen"], data)
	}
	if url := flags["--nats"]; url != "" && flags["--nats-creds"] == "" {
		args = append(args, "--nats-creds", server.CredsPath(servetest.DataDir(t, url), "toolgate"))
	}
	serving := make(chan struct{})
	p := runServe(t, toolgateBinary(t), args, func(line string) {
		if strings.Contains(line, "toolgate serving") {
			close(serving)
		}
	})
	t.Cleanup(func() { p.kill() })
	select {
	case <-serving:
	case <-p.done:
		t.Fatalf("toolgate serve exited before serving:\n%s", p.output())
	case <-time.After(60 * time.Second):
		t.Fatal("toolgate serve not serving after 60s")
	}
	return p
}

// runServe starts bin's `toolgate serve` with args in a process group of
// its own (so that kill takes the tools it runs with it, as a crashed
// host would), handing each line it logs to onLine, on one goroutine, in
// order. It runs in a directory of its own: one given no --data keeps its
// receipt key in ./toolgate-data, which must not land in the source tree.
func runServe(t testing.TB, bin string, args []string, onLine func(string)) *process {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.logMu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.logMu.Unlock()
			onLine(sc.Text())
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	return p
}

// kill SIGKILLs the process and everything it started.
func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// cliResult is what a verb run as a process printed, and its exit code.
type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs `toolgate ARGS` as a process, against the toolgate at url
// when one is given (with its --data, where its credentials are, when a
// test started it).
func cli(t *testing.T, url string, args ...string) cliResult {
	t.Helper()
	if url != "" {
		args = append(args, "--nats", url)
		if data, ok := servetest.Lookup(url); ok {
			args = append(args, "--data", data)
		}
	}
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(t.Context(), toolgateBinary(t), args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err, "toolgate %s", strings.Join(args, " "))
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func decode[T any](t *testing.T, data []byte) T {
	var v T
	require.NoError(t, json.Unmarshal(data, &v))
	return v
}

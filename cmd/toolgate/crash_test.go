package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	isolateTests()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// toolgateBinary builds cmd/toolgate once per test run, for tests that
// need a real process to kill.
func toolgateBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "toolgate-bin-")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(binDir, "toolgate")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
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
		remember(t, "nats://"+flags["--listen"], data)
	}
	if url := flags["--nats"]; url != "" && flags["--nats-creds"] == "" {
		args = append(args, "--nats-creds", server.CredsPath(dataDir(t, url), "toolgate"))
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

// TestServe_SIGKILLMidLoadLosesNothing kills `toolgate serve` (embedded
// NATS, relay and all) with SIGKILL while clients are writing, starts it
// again on the same data dir, and checks that every write it acknowledged
// is there and that the relay goes on from where it stopped: one event per
// stored revision, none lost, none doubled.
func TestServe_SIGKILLMidLoadLosesNothing(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	args := []string{"--data", data, "--listen", listen, "--relay-ack-wait", "1s", "--http", "127.0.0.1:0"}
	proc := startServe(t, args...)

	nc, js := connect(t, "nats://"+listen)
	kv, err := js.KeyValue(t.Context(), wire.CallsBucket)
	require.NoError(t, err)
	m := machine.New(bus.NewKVStore(js, kv))

	// Each worker submits a call and decides it, over and over; acked
	// records the last state the server acknowledged for each entry.
	var acked sync.Map // pendingId → machine.State
	var writes atomic.Int64
	loadCtx, stopLoad := context.WithCancel(t.Context())
	g := new(errgroup.Group)
	for w := range 8 {
		g.Go(func() error {
			for i := 0; loadCtx.Err() == nil; i++ {
				ctx, cancel := context.WithTimeout(loadCtx, 2*time.Second)
				e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprintf("w%d-%d", w, i), ToolName: "deploy", CallerBotID: "bot", ConversationID: fmt.Sprint("conv-", w)})
				if err == nil {
					acked.Store(e.PendingID, e.Status)
					writes.Add(1)
					e, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: i%2 == 0, By: "alice"})
					if err == nil {
						acked.Store(e.PendingID, e.Status)
						writes.Add(1)
					}
				}
				cancel()
			}
			return nil
		})
	}
	bustest.Eventually(t, 30*time.Second, time.Millisecond, "300 writes", func() (bool, any) { n := writes.Load(); return n >= 300, n })
	proc.kill()
	stopLoad()
	require.NoError(t, g.Wait())

	startServe(t, args...)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the client reconnected", func() (bool, any) { return nc.IsConnected(), nc.Status() })

	// Every acknowledged write is there. A write in flight at the kill
	// may have landed without its ack, so an entry may be one step on.
	n := 0
	acked.Range(func(k, v any) bool {
		n++
		e, err := m.Get(t.Context(), k.(string))
		if assert.NoError(t, err, k) {
			if v.(machine.State) == machine.StatePendingApproval {
				assert.Contains(t, []machine.State{machine.StatePendingApproval, machine.StateApproved, machine.StateRejectedByUser}, e.Status, k)
			} else {
				assert.Equal(t, v, e.Status, k)
			}
		}
		return true
	})
	require.Greater(t, n, 100)

	// The relay catches up: one event per revision in the bucket.
	revisions := kvRevisions(t, js)
	bustest.WaitRelayed(t, js)
	events := eventIDs(t, js)
	assert.Len(t, events, len(revisions), "one event per revision")
	for id := range revisions {
		assert.Equal(t, 1, events[id], "event for %s", id)
	}
}

// kvRevisions lists <pendingId>:<revision> for every write in the bucket.
func kvRevisions(t *testing.T, js jetstream.JetStream) map[string]bool {
	t.Helper()
	s, err := js.Stream(t.Context(), "KV_"+wire.CallsBucket)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	revs := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		revs[fmt.Sprintf("%s:%d", strings.TrimPrefix(msg.Subject, "$KV."+wire.CallsBucket+"."), seq)] = true
	}
	return revs
}

// eventIDs counts the events in TOOL_EVENTS by id.
func eventIDs(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	s, err := js.Stream(t.Context(), wire.EventsStream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	ids := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := s.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		ids[decode[wire.Event](t, msg.Data).ID]++
	}
	return ids
}

package faultsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
)

// TestExecutor_SIGKILLInsideAHandlerRunsAgainElsewhere kills an executor
// process (and the command it runs) in the middle of a call. After its
// lease runs out the timer queues the call again, another executor process
// runs it, executionAttempts counts both, and the tool's own log shows the
// two attempts did not overlap.
func TestExecutor_SIGKILLInsideAHandlerRunsAgainElsewhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("default: {requiresApprovalTools: none, maxExecutionAttempts: 3}\n"), 0o600))
	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	startServe(t, "--data", filepath.Join(dir, "data"), "--listen", listen, "--http", "127.0.0.1:0",
		"--roles", "relay,intake,timer", "--policy", policy)
	executor := []string{"--nats", "nats://" + listen, "--roles", "executor", "--tools", "exec", "--executor-lease", "2s"}
	first := startServe(t, executor...)

	nc, _ := servetest.Connect(t, "nats://"+listen)
	c, err := client.New(nc)
	require.NoError(t, err)
	toolLog := filepath.Join(dir, "tool.log")
	script := fmt.Sprintf(`echo "start $$ $(date +%%s%%N)" >> %[1]s; sleep 3; echo "end $$ $(date +%%s%%N)" >> %[1]s`, toolLog)
	args, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", script}})
	e, err := c.Submit(t.Context(), machine.Call{ToolCallID: "slow-1", ToolName: "exec", Arguments: args, CallerBotID: "bot", ConversationID: "crash"})
	require.NoError(t, err)

	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the first attempt started", func() (bool, any) { got := readToolLog(t, toolLog); return len(got) == 1, got })
	first.kill()
	killedAt := time.Now().UnixNano()
	startServe(t, executor...)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, err := c.Await(ctx, e.PendingID, client.UntilFinished())
	require.NoError(t, err)
	assert.Equal(t, client.Executed, out.Kind)
	got, err := c.Get(t.Context(), e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.Equal(t, 2, got.ExecutionAttempts, "the killed attempt and the one that finished")

	// The tool's log: attempt 1 started and never ended (killed with its
	// executor); attempt 2 started after the kill and ended.
	lines := readToolLog(t, toolLog)
	require.Len(t, lines, 3, "%v", lines)
	type span struct{ start, end int64 }
	attempts := map[string]*span{}
	var order []string
	for _, l := range lines {
		if attempts[l.pid] == nil {
			attempts[l.pid] = &span{}
			order = append(order, l.pid)
		}
		if l.what == "start" {
			attempts[l.pid].start = l.at
		} else {
			attempts[l.pid].end = l.at
		}
	}
	require.Len(t, order, 2)
	killed, rerun := attempts[order[0]], attempts[order[1]]
	assert.Zero(t, killed.end, "the killed attempt did not go on running")
	killed.end = killedAt
	assert.Greater(t, rerun.start, killed.end, "the attempts overlapped")
	assert.Greater(t, rerun.end, rerun.start)
}

type toolLogLine struct {
	what, pid string
	at        int64
}

func readToolLog(t *testing.T, path string) []toolLogLine {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var lines []toolLogLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue // a line being written
		}
		at, _ := strconv.ParseInt(f[2], 10, 64)
		lines = append(lines, toolLogLine{what: f[0], pid: f[1], at: at})
	}
	return lines
}

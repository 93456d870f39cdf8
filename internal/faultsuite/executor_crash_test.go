package faultsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// TestExecutor_SIGKILLInsideAHandler kills an executor process (and the
// commands it runs) in the middle of two calls: one of a tool the policy
// declares idempotent (team idem's), one of a tool it does not. After the
// lease runs out another executor process runs the first again,
// executionAttempts counting both, and the tool's own log shows the two
// attempts did not overlap. The second may have done its work, so
// nothing runs it again by itself: it ends with its outcome unknown, and
// runs once more when a person asks (`toolgate retry`).
func TestExecutor_SIGKILLInsideAHandler(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("default: {requiresApprovalTools: none, maxExecutionAttempts: 3}\nteams: {idem: {idempotent: [exec]}}\n"), 0o600))
	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	url := "nats://" + listen
	startServe(t, "--data", filepath.Join(dir, "data"), "--listen", listen, "--http", "127.0.0.1:0",
		"--roles", "relay,intake,timer", "--policy", policy)
	executor := []string{"--nats", url, "--roles", "executor", "--tools", "exec", "--executor-lease", "2s"}
	first := startServe(t, executor...)

	nc, _ := servetest.Connect(t, url)
	c, err := client.New(nc)
	require.NoError(t, err)
	submit := func(id, team, toolLog string) *machine.Entry {
		script := fmt.Sprintf(`echo "start $$ $(date +%%s%%N)" >> %[1]s; sleep 3; echo "end $$ $(date +%%s%%N)" >> %[1]s`, toolLog)
		args, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", script}})
		e, err := c.Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "exec", Arguments: args, CallerBotID: "bot", ConversationID: "crash", Team: team})
		require.NoError(t, err)
		return e
	}
	idemLog, onceLog := filepath.Join(dir, "idem.log"), filepath.Join(dir, "once.log")
	idem, once := submit("slow-1", "idem", idemLog), submit("slow-2", "", onceLog)

	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "both first attempts started", func() (bool, any) {
		a, b := readToolLog(t, idemLog), readToolLog(t, onceLog)
		return len(a) == 1 && len(b) == 1, [][]toolLogLine{a, b}
	})
	first.kill()
	killedAt := time.Now().UnixNano()
	startServe(t, executor...)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, err := c.Await(ctx, idem.PendingID, client.UntilFinished())
	require.NoError(t, err)
	assert.Equal(t, client.Executed, out.Kind)
	got, err := c.Get(t.Context(), idem.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.Equal(t, 2, got.ExecutionAttempts, "the killed attempt and the one that finished")
	// The tool's log: attempt 1 started and never ended (killed with its
	// executor); attempt 2 started after the kill and ended.
	killed, rerun := attempts(t, idemLog)
	assert.Zero(t, killed.end, "the killed attempt did not go on running")
	assert.Greater(t, rerun.start, killedAt, "the attempts overlapped")
	assert.Greater(t, rerun.end, rerun.start)

	_, err = c.Await(ctx, once.PendingID, client.UntilFinished())
	var execErr *client.ExecutionError
	require.ErrorAs(t, err, &execErr)
	got = execErr.Entry
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.True(t, got.OutcomeUnknown, got.Error)
	assert.Contains(t, got.Error, "result unknown")
	assert.Equal(t, 1, got.ExecutionAttempts, "not claimed again")
	assert.Len(t, readToolLog(t, onceLog), 1, "not run again")

	r := cli(t, url, "show", once.PendingID)
	require.Zero(t, r.code, r.stderr)
	assert.Regexp(t, `(?m)^Outcome:\s+unknown: the tool may have run; toolgate retry `+regexp.QuoteMeta(once.PendingID)+` runs it once more$`, r.stdout)
	r = cli(t, url, "retry", once.PendingID, "--reason", "its log shows it stopped")
	require.Zero(t, r.code, r.stderr)
	again := machine.PendingID("crash", "slow-2"+machine.RerunSuffix)
	assert.Equal(t, fmt.Sprintf("running %s again as %s (exec)\n", once.PendingID, again), r.stdout)
	out, err = c.Await(ctx, again, client.UntilFinished())
	require.NoError(t, err)
	assert.Equal(t, client.Executed, out.Kind)
	killed, rerun = attempts(t, onceLog)
	assert.Zero(t, killed.end)
	assert.Greater(t, rerun.end, rerun.start, "run once more, to its end")
	r = cli(t, url, "verify", again)
	assert.Zero(t, r.code, "the run again's receipts verify: %s%s", r.stdout, r.stderr)
	r = cli(t, url, "retry", once.PendingID)
	require.Zero(t, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("%s was run again already, as %s (exec): COMPLETED_SUCCESS\n", once.PendingID, again), r.stdout, "run again once")
	assert.Len(t, readToolLog(t, onceLog), 3)
}

// span is one attempt in a tool's log: when it started and ended (0:
// never).
type span struct{ start, end int64 }

// attempts reads the two attempts a tool's log holds, in order.
func attempts(t *testing.T, toolLog string) (span, span) {
	t.Helper()
	lines := readToolLog(t, toolLog)
	require.Len(t, lines, 3, "%v", lines)
	byPid := map[string]*span{}
	var order []string
	for _, l := range lines {
		if byPid[l.pid] == nil {
			byPid[l.pid] = &span{}
			order = append(order, l.pid)
		}
		if l.what == "start" {
			byPid[l.pid].start = l.at
		} else {
			byPid[l.pid].end = l.at
		}
	}
	require.Len(t, order, 2)
	return *byPid[order[0]], *byPid[order[1]]
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

package npmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TasksClient drives node/tasks-client.mjs: the TypeScript SDK's own task
// API, one command at a time.
type TasksClient struct {
	t     testing.TB
	stdin io.WriteCloser
	mu    sync.Mutex
	next  int
	lines map[int]chan map[string]any
	caps  map[string]any
}

// StartTasksClient starts tasks-client.mjs from dir (Install's), connected
// to the MCP server at url over streamable HTTP. It stops with the test.
func StartTasksClient(ctx context.Context, t testing.TB, dir, url string) *TasksClient {
	t.Helper()
	cmd := exec.CommandContext(ctx, Node(dir), filepath.Join(dir, "tasks-client.mjs"))
	cmd.Dir, cmd.Env = dir, Env(dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &TasksClient{t: t, stdin: stdin, lines: map[int]chan map[string]any{}}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var msg map[string]any
			if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
				t.Logf("tasks-client.mjs said: %s", sc.Text())
				continue
			}
			id, _ := msg["id"].(float64)
			c.mu.Lock()
			ch := c.lines[int(id)]
			c.mu.Unlock()
			if ch == nil {
				t.Logf("tasks-client.mjs answered nothing asked: %s", sc.Text())
				continue
			}
			ch <- msg
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		<-read
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("tasks-client.mjs's stderr:\n%s", stderr.String())
		}
	})
	c.caps, _ = c.Do("connect", map[string]any{"url": url})["capabilities"].(map[string]any)
	return c
}

// Capabilities are the server's, as initialize said them.
func (c *TasksClient) Capabilities() map[string]any { return c.caps }

// send sends a command and returns the channel its answers arrive on.
func (c *TasksClient) send(op string, args map[string]any) (int, chan map[string]any) {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan map[string]any, 64)
	c.lines[id] = ch
	c.mu.Unlock()
	cmd := map[string]any{"id": id, "op": op}
	for k, v := range args {
		cmd[k] = v
	}
	data, err := json.Marshal(cmd)
	require.NoError(c.t, err)
	_, err = c.stdin.Write(append(data, '\n'))
	require.NoError(c.t, err)
	return id, ch
}

// Try runs a command and returns its answer, which may be an error
// ({"error": {"code", "message"}}).
func (c *TasksClient) Try(op string, args map[string]any) map[string]any {
	c.t.Helper()
	_, ch := c.send(op, args)
	select {
	case msg := <-ch:
		return msg
	case <-time.After(30 * time.Second):
		c.t.Fatalf("tasks-client.mjs: no answer to %s %v within 30s", op, args)
		return nil
	}
}

// Do runs a command and returns its answer, failing the test on an error.
func (c *TasksClient) Do(op string, args map[string]any) map[string]any {
	c.t.Helper()
	msg := c.Try(op, args)
	require.Nil(c.t, msg["error"], "tasks-client.mjs %s %v", op, args)
	return msg
}

// Call calls a tool as a task with the SDK's callToolStream: each message
// it yields (taskCreated, taskStatus, result, error) arrives on the
// returned channel, which is closed after the last.
func (c *TasksClient) Call(name string, args map[string]any) <-chan map[string]any {
	c.t.Helper()
	_, ch := c.send("call", map[string]any{"name": name, "arguments": args})
	out := make(chan map[string]any, 64)
	go func() {
		defer close(out)
		for msg := range ch {
			if msg["end"] == true {
				return
			}
			out <- msg
		}
	}()
	return out
}

// Next is the next message of a Call, within 30 seconds.
func Next(t testing.TB, stream <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case msg, ok := <-stream:
		require.True(t, ok, "the call's stream ended")
		return msg
	case <-time.After(30 * time.Second):
		t.Fatal("no message of the call within 30s")
		return nil
	}
}

// RequireValid fails t unless every message the client checked against
// the 2025-11-25 tasks' schemas was valid, and it checked each of methods.
func (c *TasksClient) RequireValid(methods ...string) {
	c.t.Helper()
	checks, _ := c.Do("checks", nil)["checks"].([]any)
	seen := map[string]bool{}
	var bad []string
	for _, ch := range checks {
		m := ch.(map[string]any)
		what := m["what"].(string)
		seen[strings.Fields(what)[0]] = true
		if ps, _ := m["problems"].([]any); len(ps) > 0 {
			bad = append(bad, fmt.Sprintf("%s (%s): %v", what, m["schema"], ps))
		}
	}
	require.Empty(c.t, bad, "messages unlike the published schema of the 2025-11-25 tasks")
	for _, m := range methods {
		require.True(c.t, seen[m], "no %s was checked against the schema: %v", m, checks)
	}
}

// Check is a message and the name of the schema it must be valid by
// (tasks-schemas.mjs: CreateTaskResultV2Schema, TaskStatusNotificationV1Schema, …).
type Check struct {
	Schema string `json:"schema"`
	Value  any    `json:"value"`
}

// RequireValidBy fails t unless each check's value is valid by its schema.
func RequireValidBy(ctx context.Context, t testing.TB, dir string, checks []Check) {
	t.Helper()
	require.NotEmpty(t, checks)
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range checks {
		require.NoError(t, enc.Encode(c))
	}
	cmd := exec.CommandContext(ctx, Node(dir), filepath.Join(dir, "tasks-schemas.mjs"))
	cmd.Dir, cmd.Env, cmd.Stdin = dir, Env(dir), &in
	out, err := cmd.Output()
	require.NoError(t, err, "tasks-schemas.mjs")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(checks), "tasks-schemas.mjs answered:\n%s", out)
	for i, line := range lines {
		var r struct {
			Problems []string `json:"problems"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		value, _ := json.Marshal(checks[i].Value)
		require.Empty(t, r.Problems, "by %s: %s", checks[i].Schema, value)
	}
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

const executorPolicy = `
default:
  requiresApprovalTools: [guarded]
  maxExecutionAttempts: 3
`

// startExecutor runs the gate, a relay and an executor hosting handlers.
func startExecutor(t *testing.T, handlers map[string]client.Handler) *gate {
	t.Helper()
	g := startGate(t, executorPolicy)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = bus.NewRelay(g.env.JS, bus.RelayConfig{}, bustest.Logger()).Run(ctx) })
	x, err := newClient(t, g.env.URLs).NewExecutor(client.ExecutorOptions{ID: "exec-1", Lease: 3 * time.Second, Backoff: []time.Duration{10 * time.Millisecond}, Log: bustest.Logger()})
	require.NoError(t, err)
	for tool, h := range handlers {
		x.Handle(tool, h)
	}
	wg.Go(func() { assert.NoError(t, x.Run(ctx)) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return g
}

func call(conv, id, tool, args string) machine.Call {
	return machine.Call{ToolCallID: id, ToolName: tool, Arguments: json.RawMessage(args), CallerBotID: "bot", ConversationID: conv}
}

func finished(t *testing.T, c *client.Client, id string) *machine.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := c.Await(ctx, id, client.UntilFinished())
	var execErr *client.ExecutionError
	if err != nil && !errors.As(err, &execErr) && !errors.Is(err, client.ErrRejected) {
		require.NoError(t, err)
	}
	e, err := c.Get(t.Context(), id)
	require.NoError(t, err)
	return e
}

func TestExecutor_RunsOnceRetriesAndRecords(t *testing.T) {
	t.Parallel()
	var flakyRuns, okRuns atomic.Int32
	g := startExecutor(t, map[string]client.Handler{
		"report": func(_ context.Context, c client.Call) (client.Result, error) {
			okRuns.Add(1)
			return client.Result{Output: json.RawMessage(`{"rows":3,"key":"` + c.ToolCallID + `"}`), Cost: 1.5}, nil
		},
		"flaky": func(context.Context, client.Call) (client.Result, error) {
			if flakyRuns.Add(1) < 3 {
				return client.Result{}, errors.New("upstream 503")
			}
			return client.Result{Output: json.RawMessage(`"ok"`)}, nil
		},
		"broken": func(context.Context, client.Call) (client.Result, error) {
			return client.Result{Output: json.RawMessage(`{"partial":true}`)}, client.Permanent(errors.New("bad request"))
		},
	})
	ctx := t.Context()
	for _, tc := range []struct {
		tool     string
		state    machine.State
		attempts int
		result   string
		err      string
	}{
		{"report", machine.StateCompletedSuccess, 1, `{"rows":3,"key":"c-report"}`, ""},
		{"flaky", machine.StateCompletedSuccess, 3, `"ok"`, ""},
		{"broken", machine.StateCompletedFailure, 1, `{"partial":true}`, "bad request"},
	} {
		e, err := g.c.Submit(ctx, call("exec", "c-"+tc.tool, tc.tool, `{}`))
		require.NoError(t, err)
		got := finished(t, g.c, e.PendingID)
		assert.Equal(t, tc.state, got.Status, tc.tool)
		assert.Equal(t, tc.attempts, got.ExecutionAttempts, tc.tool)
		assert.JSONEq(t, tc.result, string(got.Result), tc.tool)
		assert.Equal(t, tc.err, got.Error, tc.tool)
	}
	assert.Equal(t, int32(1), okRuns.Load(), "run once")
	e, _ := g.c.Get(ctx, machine.PendingID("exec", "c-report"))
	assert.InDelta(t, 1.5, e.Cost, 1e-9)
}

func TestExecutor_NeverRunsARefusedCall(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	g := startExecutor(t, map[string]client.Handler{
		"guarded": func(_ context.Context, c client.Call) (client.Result, error) {
			n, _ := runs.LoadOrStore(c.ToolCallID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return client.Result{Output: json.RawMessage(`true`)}, nil
		},
	})
	ctx := t.Context()
	var ids []string
	for i := range 30 {
		e, err := g.c.Submit(ctx, call("mixed", fmt.Sprint("g", i), "guarded", `{}`))
		require.NoError(t, err)
		ids = append(ids, e.PendingID)
		switch i % 3 {
		case 0:
			_, err = g.c.Decide(ctx, e.PendingID, client.Decision{Approve: true, By: "alice"})
		case 1:
			_, err = g.c.Decide(ctx, e.PendingID, client.Decision{Approve: false, By: "alice", Reason: "no"})
		case 2:
			_, err = g.c.Cancel(ctx, e.PendingID, "ops", "stop")
		}
		require.NoError(t, err)
	}
	for i, id := range ids {
		e := finished(t, g.c, id)
		n, ran := runs.Load(fmt.Sprint("g", i))
		if i%3 == 0 {
			require.True(t, ran, id)
			assert.Equal(t, int32(1), n.(*atomic.Int32).Load(), id)
			assert.Equal(t, machine.StateCompletedSuccess, e.Status)
		} else {
			assert.False(t, ran, "%s (%s) reached a handler", id, e.Status)
		}
	}
}

func TestExecutor_ConversationCancelStopsRunningHandlers(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	g := startExecutor(t, map[string]client.Handler{
		"long": func(ctx context.Context, _ client.Call) (client.Result, error) {
			started <- struct{}{}
			<-ctx.Done()
			return client.Result{}, ctx.Err()
		},
	})
	ctx := t.Context()
	e, err := g.c.Submit(ctx, call("swarm", "l1", "long", `{}`))
	require.NoError(t, err)
	<-started
	reply, err := g.c.CancelConversation(ctx, "swarm", "ops", "swarm stopped")
	require.NoError(t, err)
	require.Len(t, reply.Running, 1)
	got := finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.Contains(t, got.Error, "cancelled")
}

func TestBuiltinTools(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Key", r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, r.Method+" hello")
	}))
	t.Cleanup(srv.Close)
	g := startExecutor(t, map[string]client.Handler{"http": client.HTTPTool(nil), "exec": client.ExecTool()})
	ctx := t.Context()

	e, err := g.c.Submit(ctx, call("tools", "h1", "http", `{"url":"`+srv.URL+`","method":"post"}`))
	require.NoError(t, err)
	got := finished(t, g.c, e.PendingID)
	require.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	var resp struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	require.NoError(t, json.Unmarshal(got.Result, &resp))
	assert.Equal(t, 418, resp.Status)
	assert.Equal(t, "POST hello", resp.Body)
	assert.Equal(t, "h1", resp.Headers["X-Key"], "the call id is the idempotency key")

	e, err = g.c.Submit(ctx, call("tools", "e1", "exec", `{"command":["sh","-c","echo out; echo err >&2"]}`))
	require.NoError(t, err)
	got = finished(t, g.c, e.PendingID)
	require.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	assert.JSONEq(t, `{"exitCode":0,"stdout":"out\n","stderr":"err\n"}`, string(got.Result))

	e, err = g.c.Submit(ctx, call("tools", "e2", "exec", `{"command":["sh","-c","exit 3"]}`))
	require.NoError(t, err)
	got = finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.Equal(t, 1, got.ExecutionAttempts, "a failed command is not run again")
	assert.Contains(t, got.Error, "exited with 3")

	e, err = g.c.Submit(ctx, call("tools", "e3", "exec", `{"command":[]}`))
	require.NoError(t, err)
	got = finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.Contains(t, got.Error, "command")
}

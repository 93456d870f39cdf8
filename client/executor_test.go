package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// executorPolicy declares guarded idempotent: a lease that runs out on a
// loaded machine is taken over, as the tests of refused calls and of
// load expect, where no timer runs to end a lost run (the at-most-once
// path has tests of its own: executor_lease_test.go).
const executorPolicy = `
default:
  requiresApprovalTools: [guarded]
  maxExecutionAttempts: 3
  idempotent: [guarded]
`

// startExecutor runs the gate, a relay and an executor hosting handlers.
func startExecutor(t *testing.T, handlers map[string]client.Handler) *gate {
	t.Helper()
	g := startGate(t, executorPolicy)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	x, err := newClient(t, g.Gate).NewExecutor(client.ExecutorOptions{ID: "exec-1", Lease: 3 * time.Second, Backoff: []time.Duration{10 * time.Millisecond}, Log: bustest.Logger()})
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
	var queued atomic.Pointer[time.Time]
	g := startExecutor(t, map[string]client.Handler{
		"report": func(_ context.Context, c client.Call) (client.Result, error) {
			okRuns.Add(1)
			queued.Store(&c.Queued)
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
	start := time.Now()
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
	// The handler knows since when its call was runnable (the server's
	// clock, this machine's here, in milliseconds): after the submit,
	// before now.
	require.NotNil(t, queued.Load())
	assert.WithinRange(t, *queued.Load(), start.Truncate(time.Millisecond), time.Now())
}

// TestExecutor_NeverRunsARefusedCall counts handler invocations by
// toolCallId over a mixed run of 1,000 calls decided every way there is,
// 64 at a time: approved calls run exactly once; rejected, timed-out and
// cancelled ones never reach a handler. (250 of each kind go through the
// same paths as 1,250 would, in a fraction of the suite's time.)
func TestExecutor_NeverRunsARefusedCall(t *testing.T) {
	t.Parallel()
	const calls = 1000
	var mu sync.Mutex
	runs := map[string]int{}
	g := startExecutor(t, map[string]client.Handler{
		"guarded": func(_ context.Context, c client.Call) (client.Result, error) {
			mu.Lock()
			runs[c.ToolCallID]++
			mu.Unlock()
			return client.Result{Output: json.RawMessage(`true`)}, nil
		},
	})
	ctx := t.Context()
	// Timeouts are the timer's; here a Machine whose clock is past every
	// deadline plays it.
	kv, err := g.JS.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	timer := machine.New(bus.NewKVStore(g.JS, kv), machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	decide := func(i int, id string) error {
		var err error
		switch i % 4 {
		case 0:
			_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: id, Approved: true, By: "alice"})
		case 1:
			_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: id, Approved: false, By: "alice", Reason: "no"})
		case 2:
			_, err = timer.Expire(ctx, id)
		case 3:
			_, err = g.c.Cancel(ctx, id, "ops", "stop")
		}
		return err
	}
	var eg errgroup.Group
	eg.SetLimit(64)
	for i := range calls {
		eg.Go(func() error {
			e, err := g.c.Submit(ctx, call("mixed", fmt.Sprint("g", i), "guarded", `{}`))
			if err != nil {
				return err
			}
			return decide(i, e.PendingID)
		})
	}
	require.NoError(t, eg.Wait())

	want := map[machine.State]int{
		machine.StateCompletedSuccess: calls / 4, machine.StateRejectedByUser: calls / 4,
		machine.StateRejectedByTimeout: calls / 4, machine.StateCancelled: calls / 4,
	}
	awaitStates(t, g.JS, "mixed", want)
	bustest.Eventually(t, time.Minute, time.Second, "a list of the final states", func() (bool, any) {
		entries, err := g.c.List(ctx, wire.ListRequest{ConversationID: "mixed", Limit: 1000})
		if err != nil {
			return false, err
		}
		got := map[machine.State]int{}
		for _, e := range entries {
			got[e.Status]++
		}
		return maps.Equal(got, want), got
	})
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, runs, calls/4, "only approved calls reached the handler")
	for i := range calls {
		id := fmt.Sprint("g", i)
		if i%4 == 0 {
			assert.Equal(t, 1, runs[id], "%s ran %d times", id, runs[id])
		} else {
			assert.Zero(t, runs[id], "refused call %s reached a handler", id)
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
		w.Header().Set("X-Token", r.Header.Get(client.FencingTokenHeader))
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
	assert.Equal(t, e.PendingID+"/1", resp.Headers["X-Token"], "the run's fencing token")

	e, err = g.c.Submit(ctx, call("tools", "e1", "exec", `{"command":["sh","-c","echo out; echo err >&2"]}`))
	require.NoError(t, err)
	got = finished(t, g.c, e.PendingID)
	require.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	assert.JSONEq(t, `{"exitCode":0,"stdout":"out\n","stderr":"err\n"}`, string(got.Result))

	e, err = g.c.Submit(ctx, call("tools", "e4", "exec", `{"command":["sh","-c","echo $TOOLGATE_TOOL_CALL_ID $TOOLGATE_FENCING_TOKEN"]}`))
	require.NoError(t, err)
	got = finished(t, g.c, e.PendingID)
	require.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	assert.JSONEq(t, `{"exitCode":0,"stdout":"e4 `+e.PendingID+`/1\n","stderr":""}`, string(got.Result))

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

// TestExecutor_TwoTimersThreeExecutorsUnderLoad shares one bucket between
// two timers and three executors while calls run at once, after a delay
// (the timers queue those) and after approval: every call ends, and none
// runs twice.
func TestExecutor_TwoTimersThreeExecutorsUnderLoad(t *testing.T) {
	t.Parallel()
	const calls = 300
	g := startGate(t, `
default:
  requiresApprovalTools: [approved_job]
  toolSpecificDelays: {delayed_job: 300}
`)
	for range 2 {
		toolgatetest.Start(t, g.Sibling("timer"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var mu sync.Mutex
	runs := map[string][]string{} // toolCallId → executors that ran it
	handler := func(id string) client.Handler {
		return func(_ context.Context, c client.Call) (client.Result, error) {
			mu.Lock()
			runs[c.ToolCallID] = append(runs[c.ToolCallID], id)
			mu.Unlock()
			time.Sleep(time.Duration(c.ToolCallID[len(c.ToolCallID)-1]%5) * time.Millisecond)
			return client.Result{Output: json.RawMessage(`{}`)}, nil
		}
	}
	for _, id := range []string{"exec-a", "exec-b", "exec-c"} {
		// A lease a loaded machine's heartbeats renew in time: what is
		// tested is that two timers and three executors run each call
		// once, not how soon a lease runs out.
		x, err := newClient(t, g.Gate).NewExecutor(client.ExecutorOptions{ID: id, Lease: 10 * time.Second, Log: bustest.Logger()})
		require.NoError(t, err)
		for _, tool := range []string{"job", "delayed_job", "approved_job"} {
			x.Handle(tool, handler(id))
		}
		wg.Go(func() { _ = x.Run(ctx) })
	}

	tools := []string{"job", "delayed_job", "approved_job"}
	var eg errgroup.Group
	eg.SetLimit(32)
	for i := range calls {
		eg.Go(func() error {
			e, err := g.c.Submit(ctx, call("load", fmt.Sprint("j", i), tools[i%3], `{}`))
			if err != nil || e.Status != machine.StatePendingApproval {
				return err
			}
			_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
			return err
		})
	}
	require.NoError(t, eg.Wait())

	awaitStates(t, g.JS, "load", map[machine.State]int{machine.StateCompletedSuccess: calls})
	// A list that gets no answer on a loaded machine is asked again.
	var entries []*machine.Entry
	bustest.Eventually(t, time.Minute, time.Second, "a list of every call completed", func() (bool, any) {
		var err error
		entries, err = g.c.List(ctx, wire.ListRequest{ConversationID: "load", Limit: 1000})
		if err != nil {
			return false, err
		}
		states := map[machine.State]int{}
		for _, e := range entries {
			states[e.Status]++
		}
		return states[machine.StateCompletedSuccess] == calls, states
	})
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, runs, calls)
	for id, by := range runs {
		assert.Len(t, by, 1, "%s ran on %v", id, by)
	}
	for _, e := range entries {
		assert.Equal(t, 1, e.ExecutionAttempts, e.PendingID)
	}
}

// TestExecutor_WithACredentialKnowsItsOwnLease: toolgate keeps the lease
// of an executor that holds a credential under the credential's name
// ("executor/worker-9" for the ID "worker-9"), and the executor knows
// that holder as itself: a claim or a report of its own whose answer was
// lost, found landed, is taken as its own.
func TestExecutor_WithACredentialKnowsItsOwnLease(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {requiresApprovalTools: none}")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, call("own-lease", "t1", "job", `{}`))
	require.NoError(t, err)
	_, c := g.ConnectAs(t, "executor")
	claimed, err := c.Started(ctx, e.PendingID, "worker-9")
	require.NoError(t, err)
	require.Equal(t, "executor/worker-9", claimed.Lease.Holder, "the holder is kept under the credential's name")

	x, err := c.NewExecutor(client.ExecutorOptions{ID: "worker-9"})
	require.NoError(t, err)
	assert.True(t, x.Is(claimed.Lease.Holder))
	assert.True(t, x.Is("worker-9"), "toolgate's own identity keeps the ID as it is")
	other, err := c.NewExecutor(client.ExecutorOptions{ID: "worker-99"})
	require.NoError(t, err)
	assert.False(t, other.Is(claimed.Lease.Holder))
}

// TestExecutor_AStoppedExecutorLeavesNewWorkToOthers: an executor that
// stops withdraws its requests for work that wait at toolgate, so that a
// call that becomes runnable after it stopped goes to another executor,
// not to a claim for the stopped one that would wait out its lease.
func TestExecutor_AStoppedExecutorLeavesNewWorkToOthers(t *testing.T) {
	t.Parallel()
	g := startGate(t, executorPolicy)
	ctx := t.Context()
	ran := make(chan string, 4)
	start := func(id string) (stop func()) {
		x, err := newClient(t, g.Gate).NewExecutor(client.ExecutorOptions{ID: id, Lease: 10 * time.Minute, Log: bustest.Logger()})
		require.NoError(t, err)
		x.Handle("report", func(context.Context, client.Call) (client.Result, error) {
			ran <- id
			return client.Result{Output: json.RawMessage(`true`)}, nil
		})
		xctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- x.Run(xctx) }()
		stop = sync.OnceFunc(func() { cancel(); assert.NoError(t, <-done) })
		t.Cleanup(stop)
		return stop
	}
	runs := func(id string) string {
		t.Helper()
		e, err := g.c.Submit(ctx, call("stopping", id, "report", `{}`))
		require.NoError(t, err)
		assert.Equal(t, machine.StateCompletedSuccess, finished(t, g.c, e.PendingID).Status, "%s ran", id)
		select {
		case by := <-ran:
			return by
		default:
			t.Fatalf("%s finished unseen by any handler", id)
			return ""
		}
	}

	stopFirst := start("first")
	require.Equal(t, "first", runs("before"), "the only executor runs it, and asks for more")
	stopFirst()
	start("second")
	assert.Equal(t, "second", runs("after"), "the stopped executor's requests for work claimed nothing")
}

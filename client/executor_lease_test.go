package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// handlerRun is one run of a handler as the handler saw it.
type handlerRun struct {
	by      string // the executor's ID
	attempt int
	token   string // its fencing token
	started time.Time
	stopped time.Time // when its context ended, or it returned
	cause   error     // context.Cause of its context when it returned
}

// runExecutor runs an executor with ID id on c, hosting tool with h,
// until the test ends.
func runExecutor(t *testing.T, c *client.Client, id string, lease time.Duration, tool string, h client.Handler) {
	t.Helper()
	x, err := c.NewExecutor(client.ExecutorOptions{ID: id, Lease: lease, Backoff: []time.Duration{10 * time.Millisecond}, Log: bustest.Logger()})
	require.NoError(t, err)
	x.Handle(tool, h)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, x.Run(ctx)) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// connectThrough connects a client to g through link, with toolgate's
// own credential.
func connectThrough(t *testing.T, g *gate, link *natsLink, name string) *client.Client {
	t.Helper()
	nc, err := bus.Connect(bus.ConnConfig{URLs: link.URL, Name: name, CredsFile: g.Creds()})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	require.NoError(t, err)
	return c
}

// holding is a handler that reports each run on runs as it starts (with
// its stop time zero) and again as it returns, holding the run until its
// context ends when hold says so.
func holding(by string, runs chan<- handlerRun, hold bool) client.Handler {
	return func(ctx context.Context, c client.Call) (client.Result, error) {
		r := handlerRun{by: by, attempt: c.Attempt, token: c.FencingToken(), started: time.Now()}
		runs <- r
		if hold {
			<-ctx.Done()
		}
		r.stopped, r.cause = time.Now(), context.Cause(ctx)
		runs <- r
		return client.Result{Output: json.RawMessage(`{}`)}, ctx.Err()
	}
}

// next returns the next run reported on runs, failing the test after
// wait.
func next(t *testing.T, runs <-chan handlerRun, wait time.Duration, what string) handlerRun {
	t.Helper()
	select {
	case r := <-runs:
		return r
	case <-time.After(wait):
		t.Fatalf("%s: nothing after %s", what, wait)
		return handlerRun{}
	}
}

// leaseOf returns the last expiry of holder's lease on pendingID, from
// the call's stored revisions.
func leaseOf(t *testing.T, g *gate, pendingID, holder string) time.Time {
	t.Helper()
	kv, err := g.JS.KeyValue(t.Context(), wire.CallsBucket)
	require.NoError(t, err)
	revisions, err := kv.History(t.Context(), pendingID)
	require.NoError(t, err)
	var expires int64
	for _, r := range revisions {
		var e machine.Entry
		require.NoError(t, json.Unmarshal(r.Value(), &e))
		if e.Lease != nil && strings.HasSuffix(e.Lease.Holder, holder) {
			expires = e.Lease.ExpiresAt
		}
	}
	require.NotZero(t, expires, "%s never held %s", holder, pendingID)
	return time.UnixMilli(expires)
}

// TestExecutor_StopsAHandlerCutOffBeforeItsLeaseRunsOut partitions an
// executor from toolgate while its handler runs. Its heartbeats get no
// answer, so before its lease can run out the executor ends the
// handler's context, with ErrLeaseLost as its cause; only after that,
// once the lease has run out, does another executor claim the call (its
// tool declared idempotent) and run it, as the next attempt, under the
// next fencing token.
func TestExecutor_StopsAHandlerCutOffBeforeItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {requiresApprovalTools: none, maxExecutionAttempts: 3, idempotent: [job]}")
	link := startLink(t, g.NATSURL)
	const lease = 3 * time.Second
	runs := make(chan handlerRun, 8)
	runExecutor(t, connectThrough(t, g, link, "cut-off"), "cut-off", lease, "job", holding("cut-off", runs, true))
	e, err := g.c.Submit(t.Context(), call("partition", "p1", "job", `{}`))
	require.NoError(t, err)
	first := next(t, runs, 20*time.Second, "the first run started")
	require.Equal(t, "cut-off", first.by)
	assert.Equal(t, e.PendingID+"/1", first.token)
	// The other executor waits for work from now on: it gets the call
	// once the first one's lease runs out.
	runExecutor(t, newClient(t, g.Gate), "other", lease, "job", holding("other", runs, false))

	link.partition()
	partitioned := time.Now()
	stopped := next(t, runs, 20*time.Second, "the cut-off run stopped")
	require.Equal(t, "cut-off", stopped.by)
	assert.ErrorIs(t, stopped.cause, client.ErrLeaseLost)
	assert.Contains(t, stopped.cause.Error(), "not renewed in time")
	second := next(t, runs, 20*time.Second, "the other executor's run started")
	require.Equal(t, "other", second.by)
	assert.Equal(t, 2, second.attempt)
	assert.Equal(t, e.PendingID+"/2", second.token, "the second run's fencing token is not the first's")
	expired := leaseOf(t, g, e.PendingID, "cut-off")
	t.Logf("partitioned at %s; the cut-off run stopped at %s, its lease ran out at %s, the other run started at %s",
		partitioned.Format("15:04:05.000"), stopped.stopped.Format("15:04:05.000"), expired.Format("15:04:05.000"), second.started.Format("15:04:05.000"))
	assert.True(t, stopped.stopped.Before(expired), "the cut-off run stopped before its lease ran out")
	assert.True(t, second.started.After(stopped.stopped), "the other run started after the cut-off one stopped")
	assert.False(t, second.started.Before(expired), "the other run started once the lease had run out")

	link.heal()
	got := finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	assert.Equal(t, 2, got.ExecutionAttempts)
	assert.Equal(t, "other", got.LastTransition.Actor)
}

// TestExecutor_ALostRunOfAToolNotIdempotentIsNeverRunAgain partitions
// an executor from toolgate while its handler runs a tool the policy does
// not declare idempotent, with attempts left and another executor
// waiting: the run may have done its work, so nobody runs it again; at
// the end of its lease the timer ends the call with its outcome unknown,
// saying so, for the agent and the approver to read.
func TestExecutor_ALostRunOfAToolNotIdempotentIsNeverRunAgain(t *testing.T) {
	t.Parallel()
	tg := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Policy: "default: {requiresApprovalTools: none, maxExecutionAttempts: 3}"})
	g := &gate{Gate: tg, c: tg.Client}
	link := startLink(t, g.NATSURL)
	runs := make(chan handlerRun, 8)
	runExecutor(t, connectThrough(t, g, link, "cut-off"), "cut-off", 3*time.Second, "job", holding("cut-off", runs, true))
	e, err := g.c.Submit(t.Context(), call("partition", "n1", "job", `{}`))
	require.NoError(t, err)
	require.Equal(t, "cut-off", next(t, runs, 20*time.Second, "the first run started").by)
	runExecutor(t, newClient(t, g.Gate), "other", 3*time.Second, "job", holding("other", runs, false))

	link.partition()
	stopped := next(t, runs, 20*time.Second, "the cut-off run stopped")
	assert.ErrorIs(t, stopped.cause, client.ErrLeaseLost)
	got := finished(t, g.c, e.PendingID)
	link.heal()
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.True(t, got.OutcomeUnknown, got.Error)
	assert.Contains(t, got.Error, "result unknown")
	assert.Equal(t, 1, got.ExecutionAttempts, "claimed once")
	select {
	case r := <-runs:
		t.Fatalf("a second run: %+v", r)
	default:
	}
}

// TestExecutor_ALeaseLostOnTheLastAttemptIsTheOutcome: a handler stopped
// before its lease could run out unrenewed, on the call's last attempt,
// fails the call, and the failure says why once the executor can report
// it.
func TestExecutor_ALeaseLostOnTheLastAttemptIsTheOutcome(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {requiresApprovalTools: none, maxExecutionAttempts: 1}")
	link := startLink(t, g.NATSURL)
	runs := make(chan handlerRun, 4)
	runExecutor(t, connectThrough(t, g, link, "cut-off"), "cut-off", 3*time.Second, "job", holding("cut-off", runs, true))
	e, err := g.c.Submit(t.Context(), call("partition", "p1", "job", `{}`))
	require.NoError(t, err)
	next(t, runs, 20*time.Second, "the run started")
	link.partition()
	stopped := next(t, runs, 20*time.Second, "the run stopped")
	assert.ErrorIs(t, stopped.cause, client.ErrLeaseLost)
	link.heal()
	got := finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.Contains(t, got.Error, "lease lost: not renewed in time")
	assert.True(t, got.OutcomeUnknown, "stopped midway, it may have done its work")
	assert.Equal(t, 1, got.ExecutionAttempts)
}

// TestExecutor_AHeartbeatWhoseAnswerIsLostIsAskedAgainWithinTheLease
// loses toolgate's answers to an executor (its requests still get
// through) from its second heartbeat on, and lets them through again from
// the heartbeat it asks next: that one comes soon enough, each attempt
// bounded by what is left of the lease, to be answered before the
// executor would stop the handler, so the handler runs on and the call
// completes on its first attempt. (Asked again only after a doubled
// bound and a second's pause, it would come after the handler had been
// stopped.)
func TestExecutor_AHeartbeatWhoseAnswerIsLostIsAskedAgainWithinTheLease(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {requiresApprovalTools: none}")
	link := startLink(t, g.NATSURL)
	var mu sync.Mutex
	var heartbeats []time.Time // as the executor sent them
	hook := func(subject string) {
		if subject != wire.APISubject(wire.EndpointHeartbeat) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		heartbeats = append(heartbeats, time.Now())
		switch len(heartbeats) {
		case 2:
			link.dropDown.Store(true) // its answer lost, and every other
		case 3:
			link.dropDown.Store(false) // answered
		}
	}
	link.onPublish.Store(&hook)
	sent := func() int { mu.Lock(); defer mu.Unlock(); return len(heartbeats) }

	runs := make(chan handlerRun, 4)
	release := make(chan struct{})
	handler := func(ctx context.Context, c client.Call) (client.Result, error) {
		runs <- handlerRun{attempt: c.Attempt, started: time.Now()}
		select {
		case <-release:
		case <-ctx.Done():
		}
		runs <- handlerRun{attempt: c.Attempt, stopped: time.Now(), cause: context.Cause(ctx)}
		return client.Result{Output: json.RawMessage(`{}`)}, ctx.Err()
	}
	runExecutor(t, connectThrough(t, g, link, "lossy"), "lossy", 6*time.Second, "job", handler)
	e, err := g.c.Submit(t.Context(), call("lossy", "l1", "job", `{}`))
	require.NoError(t, err)
	next(t, runs, 20*time.Second, "the run started")
	// The fourth heartbeat goes a third of the lease after the third was
	// answered: past the time by which the lease had to be renewed had
	// only the first been answered.
	bustest.Eventually(t, 20*time.Second, 10*time.Millisecond, "the fourth heartbeat sent", func() (bool, any) { n := sent(); return n >= 4, n })
	close(release)
	end := next(t, runs, 20*time.Second, "the run ended")
	assert.NoError(t, end.cause, "the handler ran on")
	mu.Lock()
	for i, at := range heartbeats {
		t.Logf("heartbeat %d sent %s after the first", i+1, at.Sub(heartbeats[0]).Round(time.Millisecond))
	}
	mu.Unlock()
	got := finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	assert.Equal(t, 1, got.ExecutionAttempts)
}

// TestHTTPTool_ARunAfterALeaseLossCarriesTheNextToken runs the built-in
// http tool on an executor that is partitioned from toolgate while its
// request waits at the far side: that request is abandoned before the
// lease runs out, and the run another executor makes then sends the same
// Idempotency-Key with the next fencing token, so the far side can tell
// the second run from the first (the policy declares http idempotent for
// that reason).
func TestHTTPTool_ARunAfterALeaseLossCarriesTheNextToken(t *testing.T) {
	t.Parallel()
	type request struct {
		key, token string
		at         time.Time
	}
	requests := make(chan request, 4)
	abandoned := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := r.Header.Get(client.FencingTokenHeader)
		requests <- request{key: r.Header.Get("Idempotency-Key"), token: token, at: time.Now()}
		if strings.HasSuffix(token, "/1") {
			<-r.Context().Done() // the first run's request waits until it is abandoned
			abandoned <- time.Now()
			return
		}
		fmt.Fprint(w, "done")
	}))
	t.Cleanup(srv.Close)
	g := startGate(t, "default: {requiresApprovalTools: none, maxExecutionAttempts: 3, idempotent: [http]}")
	link := startLink(t, g.NATSURL)
	const lease = 3 * time.Second
	runExecutor(t, connectThrough(t, g, link, "cut-off"), "cut-off", lease, "http", client.HTTPTool(nil))
	e, err := g.c.Submit(t.Context(), call("fenced", "h1", "http", `{"url":"`+srv.URL+`","method":"post"}`))
	require.NoError(t, err)
	first := <-requests
	runExecutor(t, newClient(t, g.Gate), "other", lease, "http", client.HTTPTool(nil))

	link.partition()
	var second request
	select {
	case second = <-requests:
	case <-time.After(20 * time.Second):
		t.Fatal("no second run's request after 20s")
	}
	select {
	case at := <-abandoned:
		assert.True(t, at.Before(second.at), "the first run's request was abandoned (%s) before the second run's came (%s)",
			at.Format("15:04:05.000"), second.at.Format("15:04:05.000"))
	case <-time.After(20 * time.Second):
		t.Fatal("the first run's request still waits, 20s after the second run's came")
	}
	assert.Equal(t, "h1", first.key)
	assert.Equal(t, first.key, second.key, "every run of a call has its idempotency key")
	assert.Equal(t, e.PendingID+"/1", first.token)
	assert.Equal(t, e.PendingID+"/2", second.token)

	link.heal()
	got := finished(t, g.c, e.PendingID)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status, got.Error)
	assert.Equal(t, 2, got.ExecutionAttempts)
}

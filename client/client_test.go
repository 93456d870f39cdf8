package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// gate is toolgate's request API and relay over a real embedded JetStream
// server, evaluating calls against a policy document.
type gate struct {
	*toolgatetest.Gate
	c     *client.Client
	clock *toolgatetest.Clock
}

func startGate(t *testing.T, doc string) *gate {
	t.Helper()
	clock := new(toolgatetest.Clock)
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: doc, Clock: clock.Now})
	return &gate{Gate: g, c: g.Client, clock: clock}
}

// newClient connects anew to g, as another process would, with toolgate's
// own credential (which sees every call).
func newClient(t *testing.T, g *toolgatetest.Gate) *client.Client {
	t.Helper()
	_, c := g.ConnectAs(t, g.Creds())
	return c
}

func bash(conv, id, command string) machine.Call {
	args, _ := json.Marshal(map[string]string{"command": command})
	return machine.Call{ToolCallID: id, ToolName: "Bash", Arguments: args, CallerBotID: "bot", ConversationID: conv}
}

// awaitAsync runs Await in the background.
func awaitAsync(c *client.Client, ctx context.Context, id string, opts ...client.AwaitOption) <-chan result {
	ch := make(chan result, 1)
	go func() {
		o, err := c.Await(ctx, id, opts...)
		ch <- result{o, err}
	}()
	return ch
}

type result struct {
	out client.Outcome
	err error
}

func receive(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not return")
		return result{}
	}
}

// assertStillWaiting checks that Await has not answered yet.
func assertStillWaiting(t *testing.T, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Await returned early: %+v, %v", r.out, r.err)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestAwait_ApprovalWithEditedArguments(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, bash("c1", "t1", "rm -r build"))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	got := awaitAsync(g.c, ctx, e.PendingID)
	assertStillWaiting(t, got)
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice", Reason: "only build/",
		Arguments: json.RawMessage(`{"command":"rm -r build/out"}`)})
	require.NoError(t, err)

	r := receive(t, got)
	require.NoError(t, r.err)
	assert.Equal(t, client.Approved, r.out.Kind)
	assert.True(t, r.out.Runnable())
	assert.True(t, r.out.Edited)
	assert.JSONEq(t, `{"command":"rm -r build/out"}`, string(r.out.Arguments))
	assert.Equal(t, "alice", r.out.By)
	assert.Equal(t, "only build/", r.out.Reason)
	assert.Equal(t, machine.ScopeOnce, r.out.Scope)
}

func TestAwait_RejectionIsAnErrorNeverAResult(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, bash("c1", "t1", "git push --force"))
	require.NoError(t, err)
	got := awaitAsync(g.c, ctx, e.PendingID)
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, By: "alice", Reason: "not on main"})
	require.NoError(t, err)

	r := receive(t, got)
	require.ErrorIs(t, r.err, client.ErrRejected)
	var rej *client.RejectedError
	require.ErrorAs(t, r.err, &rej)
	assert.Equal(t, client.RejectedByUser, rej.Kind)
	assert.Equal(t, "alice", rej.By)
	assert.Equal(t, "not on main", rej.Reason)
	assert.Equal(t, machine.StateRejectedByUser, rej.Entry.Status)
	assert.Contains(t, r.err.Error(), "rejected by alice: not on main")
	assert.Equal(t, client.Outcome{}, r.out, "a rejection carries no outcome")
	assert.False(t, r.out.Runnable())
	assert.NotErrorIs(t, r.err, machine.ErrConflict)

	// Awaited again (the agent restarted), it is the same refusal.
	_, err = newClient(t, g.Gate).Await(ctx, e.PendingID)
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, client.RejectedByUser, rej.Kind)
}

func TestAwait_TimeoutAndCancelAreRejections(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {approvalTimeoutMs: 1, autoRejectOnTimeout: true}")
	ctx := t.Context()

	e, err := g.c.Submit(ctx, bash("c1", "slow", "make release"))
	require.NoError(t, err)
	got := awaitAsync(g.c, ctx, e.PendingID)
	// Not the timer role, which would also expire the next call before
	// it is cancelled: the test expires this one as the timer would.
	g.clock.Skip(time.Second)
	_, err = g.Service.Timer().Expire(ctx, e.PendingID)
	require.NoError(t, err)
	r := receive(t, got)
	var rej *client.RejectedError
	require.ErrorAs(t, r.err, &rej)
	assert.ErrorIs(t, r.err, client.ErrRejected)
	assert.Equal(t, client.RejectedByTimeout, rej.Kind)
	assert.Equal(t, "timer", rej.By)
	assert.Contains(t, r.err.Error(), "timed out")
	assert.Empty(t, r.out.Kind)

	e, err = g.c.Submit(ctx, bash("c1", "gone", "make release"))
	require.NoError(t, err)
	got = awaitAsync(g.c, ctx, e.PendingID)
	_, err = g.c.Cancel(ctx, e.PendingID, "ops", "conversation closed")
	require.NoError(t, err)
	r = receive(t, got)
	require.ErrorAs(t, r.err, &rej)
	assert.Equal(t, client.Cancelled, rej.Kind)
	assert.Equal(t, "ops", rej.By)
	assert.Equal(t, "conversation closed", rej.Reason)
	assert.Empty(t, r.out.Kind)
}

func TestRequest_PolicyDenyNamesTheRule(t *testing.T) {
	t.Parallel()
	g := startGate(t, `default: {rules: {deny: ["Bash(rm -rf *)"]}}`)
	out, err := g.c.Request(t.Context(), bash("c1", "t1", "rm -rf /"))
	require.ErrorIs(t, err, client.ErrRejected)
	var rej *client.RejectedError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, client.DeniedByPolicy, rej.Kind)
	assert.Equal(t, "policy", rej.By)
	assert.Equal(t, `rules.deny "Bash(rm -rf *)" (default)`, rej.Rule)
	assert.Contains(t, err.Error(), `denied by policy: rules.deny "Bash(rm -rf *)"`)
	assert.Equal(t, client.Outcome{}, out)
}

func TestAwait_ScheduledCallIsAnsweredAtItsTime(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {requiresApprovalTools: none, defaultDelayMs: 300}")
	start := time.Now()
	out, err := g.c.Request(t.Context(), bash("c1", "t1", "ls"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "answered before its scheduled time")
	assert.Equal(t, client.Scheduled, out.Kind, "distinct from a human's approval")
	assert.True(t, out.Runnable())
	assert.Equal(t, "policy", out.By)
	assert.Contains(t, out.Reason, "defaultDelayMs")
	assert.JSONEq(t, `{"command":"ls"}`, string(out.Arguments))
	assert.False(t, out.Edited)
}

func TestAwait_ScheduledCallCancelledBeforeItsTime(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {requiresApprovalTools: none, defaultDelayMs: 60000}")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, bash("c1", "t1", "ls"))
	require.NoError(t, err)
	require.Equal(t, machine.StateScheduled, e.Status)
	got := awaitAsync(g.c, ctx, e.PendingID)
	assertStillWaiting(t, got)
	_, err = g.c.Cancel(ctx, e.PendingID, "alice", "changed my mind")
	require.NoError(t, err)
	var rej *client.RejectedError
	require.ErrorAs(t, receive(t, got).err, &rej)
	assert.Equal(t, client.Cancelled, rej.Kind)
}

func TestAwait_UntilFinishedWaitsForTheRun(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	agent, executor := g.c, newClient(t, g.Gate)

	ok, err := agent.Submit(ctx, bash("c1", "ok", "make test"))
	require.NoError(t, err)
	bad, err := agent.Submit(ctx, bash("c1", "bad", "make lint"))
	require.NoError(t, err)
	gotOK := awaitAsync(agent, ctx, ok.PendingID, client.UntilFinished())
	gotBad := awaitAsync(agent, ctx, bad.PendingID, client.UntilFinished())
	for _, id := range []string{ok.PendingID, bad.PendingID} {
		_, err = executor.Decide(ctx, wire.DecideRequest{PendingID: id, Approved: true, By: "alice"})
		require.NoError(t, err)
		_, err = executor.Started(ctx, id, "exec-1")
		require.NoError(t, err)
	}
	assertStillWaiting(t, gotOK)
	_, err = executor.Succeed(ctx, ok.PendingID, "exec-1", json.RawMessage(`{"passed":12}`), 0.25)
	require.NoError(t, err)
	_, err = executor.Fail(ctx, bad.PendingID, "exec-1", "exit status 2", 0.1)
	require.NoError(t, err)

	r := receive(t, gotOK)
	require.NoError(t, r.err)
	assert.Equal(t, client.Executed, r.out.Kind)
	assert.JSONEq(t, `{"passed":12}`, string(r.out.Result))
	assert.InDelta(t, 0.25, r.out.Cost, 1e-9)
	assert.Equal(t, "alice", r.out.By)
	assert.False(t, r.out.Runnable(), "it already ran")

	r = receive(t, gotBad)
	var execErr *client.ExecutionError
	require.ErrorAs(t, r.err, &execErr)
	assert.NotErrorIs(t, r.err, client.ErrRejected, "a failure is not a rejection")
	assert.Equal(t, "exit status 2", execErr.Message)
	assert.Equal(t, client.Failed, r.out.Kind)
	assert.InDelta(t, 0.1, r.out.Cost, 1e-9)
}

func TestAwait_RunningCallIsNotHandedOutAgain(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, bash("c1", "t1", "make deploy"))
	require.NoError(t, err)
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	_, err = g.c.Started(ctx, e.PendingID, "bot")
	require.NoError(t, err)

	// The agent restarts mid-run: Await must not tell it to run the call
	// again, only how the run it started ends.
	got := awaitAsync(newClient(t, g.Gate), ctx, e.PendingID)
	assertStillWaiting(t, got)
	_, err = g.c.Succeed(ctx, e.PendingID, "bot", json.RawMessage(`"deployed"`), 0)
	require.NoError(t, err)
	r := receive(t, got)
	require.NoError(t, r.err)
	assert.Equal(t, client.Executed, r.out.Kind)

	// An executor cannot claim what the agent already ran.
	_, err = g.c.Started(ctx, e.PendingID, "exec-1")
	assert.ErrorIs(t, err, machine.ErrConflict)
}

func TestDecide_RefusalsMatchTheDomainErrors(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {approvers: [alice, bob]}")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, bash("c1", "t1", "make deploy"))
	require.NoError(t, err)

	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "mallory"})
	require.ErrorIs(t, err, machine.ErrForbidden)
	assert.Contains(t, err.Error(), "mallory is not among this call's approvers")

	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, By: "alice", Reason: "not today"})
	require.NoError(t, err)
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "bob"})
	require.ErrorIs(t, err, machine.ErrConflict)
	assert.Contains(t, err.Error(), "REJECTED_BY_USER by alice")
	assert.Contains(t, err.Error(), "not today")
	var apiErr *wire.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "alice", apiErr.Entry.ApprovedOrRejectedByUserID)

	_, err = g.c.Get(ctx, "c1.nope")
	assert.ErrorIs(t, err, machine.ErrNotFound)
	_, err = g.c.Await(ctx, "c1.nope")
	assert.ErrorIs(t, err, machine.ErrNotFound)
	_, err = g.c.Await(ctx, "c1.>")
	assert.ErrorIs(t, err, machine.ErrNotFound, "a wildcard is no pendingId")
	_, err = g.c.Submit(ctx, machine.Call{ToolName: "no spaces", CallerBotID: "bot", ConversationID: "c1"})
	assert.ErrorIs(t, err, machine.ErrInvalid)
}

// TestDecide_ARequestIDNamesOneDecisionAcrossItsSends: a decision sent
// again with its requestId (its first answer lost) is answered with what
// the first wrote; one sent without gets an id of its own each time, so
// a second is a decision of its own, refused as a conflict.
func TestDecide_ARequestIDNamesOneDecisionAcrossItsSends(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {approvers: [alice]}")
	ctx := t.Context()
	named, err := g.c.Submit(ctx, bash("c1", "t1", "make deploy"))
	require.NoError(t, err)
	unnamed, err := g.c.Submit(ctx, bash("c1", "t2", "make deploy"))
	require.NoError(t, err)

	d := wire.DecideRequest{PendingID: named.PendingID, Approved: true, By: "alice", RequestID: "approve-t1"}
	first, err := g.c.Decide(ctx, d)
	require.NoError(t, err)
	again, err := g.c.Decide(ctx, d)
	require.NoError(t, err, "the same decision sent again")
	assert.Equal(t, first, again)

	d = wire.DecideRequest{PendingID: unnamed.PendingID, Approved: true, By: "alice"}
	_, err = g.c.Decide(ctx, d)
	require.NoError(t, err)
	_, err = g.c.Decide(ctx, d)
	assert.ErrorIs(t, err, machine.ErrConflict, "a second decision, not the first sent again")
}

func TestClient_ListAndCancelConversation(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	for _, id := range []string{"a", "b"} {
		_, err := g.c.Submit(ctx, bash("conv-x", id, "echo "+id))
		require.NoError(t, err)
	}
	_, err := g.c.Submit(ctx, bash("conv-y", "c", "echo c"))
	require.NoError(t, err)

	entries, err := g.c.List(ctx, wire.ListRequest{ConversationID: "conv-x", Status: machine.StatePendingApproval})
	require.NoError(t, err)
	assert.Len(t, entries, 2)

	reply, err := g.c.CancelConversation(ctx, "conv-x", "ops", "done")
	require.NoError(t, err)
	assert.Len(t, reply.Cancelled, 2)
	entries, err = g.c.List(ctx, wire.ListRequest{Status: machine.StatePendingApproval})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "conv-y", entries[0].ConversationID)
}

func TestClient_WithoutToolgateSaysItIsNotReachable(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithUnavailableWait(0))
	require.NoError(t, err)

	_, err = c.Submit(t.Context(), bash("c1", "t1", "ls"))
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), "toolgate's request API is not reachable on NATS")
	assert.Contains(t, err.Error(), "toolgate.submit")
	_, err = c.Await(t.Context(), "c1.t1")
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), "toolgate.get")
}

func TestAwait_EndsWithItsContext(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	e, err := g.c.Submit(t.Context(), bash("c1", "t1", "ls"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = g.c.Await(ctx, e.PendingID)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "still PENDING_APPROVAL")
}

// TestAwait_ManyAgentsOneDecisionEach checks that each waiter gets its own
// call's answer, not a neighbour's.
func TestAwait_ManyAgentsOneDecisionEach(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	const n = 20
	ids := make([]string, n)
	chans := make([]<-chan result, n)
	for i := range n {
		e, err := g.c.Submit(ctx, bash("many", string(rune('a'+i)), "echo"))
		require.NoError(t, err)
		ids[i] = e.PendingID
		chans[i] = awaitAsync(g.c, ctx, e.PendingID)
	}
	var approved atomic.Int32
	for i, id := range ids {
		_, err := g.c.Decide(ctx, wire.DecideRequest{PendingID: id, Approved: i%2 == 0, By: "alice"})
		require.NoError(t, err)
	}
	for i, ch := range chans {
		r := receive(t, ch)
		if i%2 == 0 {
			require.NoError(t, r.err)
			assert.Equal(t, ids[i], r.out.PendingID)
			approved.Add(1)
		} else {
			assert.True(t, errors.Is(r.err, client.ErrRejected), "%s: %v", ids[i], r.err)
		}
	}
	assert.EqualValues(t, n/2, approved.Load())
}

// TestAwait_AfterItsSubmitReadsNothing: once a client knows its name (its
// first submit's answer), it subscribes to a call's revisions before
// submitting it, so Await, after the submit, hears what happened since
// without reading the entry: here a decision made before Await began.
// A call it did not submit is read, as before.
func TestAwait_AfterItsSubmitReadsNothing(t *testing.T) {
	t.Parallel()
	g := startGate(t, "")
	ctx := t.Context()
	_, agent := g.ConnectAs(t, "agent")
	spy, _ := g.ConnectAs(t, g.Creds())
	gets, err := spy.SubscribeSync(wire.APISubject(wire.EndpointGet))
	require.NoError(t, err)
	require.NoError(t, spy.Flush())
	readsOf := func(id string) int {
		require.NoError(t, spy.Flush())
		n := 0
		for {
			msg, err := gets.NextMsg(100 * time.Millisecond)
			if err != nil {
				return n
			}
			if strings.Contains(string(msg.Data), id) {
				n++
			}
		}
	}
	call := func(id string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "Bash", Arguments: json.RawMessage(`{"command":"rm -r build"}`), ConversationID: "watched"}
	}

	first, err := agent.Submit(ctx, call("first"))
	require.NoError(t, err)
	second, err := agent.Submit(ctx, call("second"))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, second.Status)
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: second.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	out, err := agent.Await(ctx, second.PendingID)
	require.NoError(t, err)
	assert.Equal(t, client.Approved, out.Kind)
	assert.Equal(t, "alice", out.By)
	assert.Zero(t, readsOf(second.PendingID), "subscribed before its submit: nothing to read")

	// The first submit taught the client its name only in its answer:
	// Await subscribes then, and reads.
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: first.PendingID, Approved: true, By: "bob"})
	require.NoError(t, err)
	out, err = agent.Await(ctx, first.PendingID)
	require.NoError(t, err)
	assert.Equal(t, "bob", out.By)
	assert.Equal(t, 1, readsOf(first.PendingID))

	// A call nobody awaits: its subscription goes a few seconds after.
	nc, lone := g.ConnectAs(t, "agent")
	_, err = lone.Submit(ctx, call("taught"))
	require.NoError(t, err)
	before := nc.NumSubscriptions()
	_, err = lone.Submit(ctx, call("unawaited"))
	require.NoError(t, err)
	assert.Equal(t, before+1, nc.NumSubscriptions())
	bustest.Eventually(t, 15*time.Second, 50*time.Millisecond, "the subscription made for Await let go", func() (bool, any) {
		n := nc.NumSubscriptions()
		return n == before, fmt.Sprintf("%d subscriptions, %d before", n, before)
	})
}

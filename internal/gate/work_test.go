package gate_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

var executor = gate.Actor{Name: "exec", Roles: []wire.Role{wire.RoleExecutor}}

// workService is a toolgate process that serves executors: a Service
// whose work queue (and index) follow the bucket, under a policy that
// answers every call with v.
func workService(t *testing.T, env *bustest.Env, v machine.Verdict) *gate.Service {
	t.Helper()
	s := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return v, nil
	})})
	feed := views.NewCallsFeed(env.JS, env.Buckets.Calls)
	feed.Add(s.Runtime().CallsView(bustest.Logger()))
	feed.Add(s.Runtime().WorkView())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx, bustest.Logger()) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-feed.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("the feed never read the bucket")
	}
	return s
}

func submitCall(t *testing.T, s *gate.Service, conv, id, tool string) *machine.Entry {
	t.Helper()
	e, err := s.Submit(t.Context(), gate.System, machine.Call{ToolCallID: id, ToolName: tool, CallerBotID: "bot", ConversationID: conv})
	require.NoError(t, err)
	return e
}

func take(t *testing.T, s *gate.Service, r wire.WorkRequest) []*machine.Entry {
	t.Helper()
	if r.LeaseMs == 0 {
		r.LeaseMs = time.Minute.Milliseconds()
	}
	reply, err := s.TakeWork(t.Context(), executor, r)
	require.NoError(t, err)
	var got []*machine.Entry
	for _, c := range reply.Calls {
		got = append(got, c.Entry)
	}
	return got
}

// TestTakeWork_HandsEachRunnableCallOnce: four executors taking from two
// processes get every runnable call of their tool once, claimed for
// them; a call waiting for approval, denied, cancelled or of another tool
// reaches none of them.
func TestTakeWork_HandsEachRunnableCallOnce(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	run := machine.Verdict{Action: machine.ActionRun}
	a, b := workService(t, env, run), workService(t, env, run)
	const n = 40
	want := map[string]bool{}
	for i := range n {
		want[submitCall(t, a, "once", fmt.Sprint("c", i), "deploy").PendingID] = true
	}
	other := submitCall(t, a, "once", "other", "search")
	cancelled := submitCall(t, a, "once", "cancelled", "deploy")
	_, err := a.Cancel(t.Context(), gate.System, wire.CancelRequest{PendingID: cancelled.PendingID, By: "ops", Reason: "changed"})
	require.NoError(t, err)
	asked := submitCall(t, workService(t, env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}), "once", "asked", "deploy")
	denied := submitCall(t, workService(t, env, machine.Verdict{Action: machine.ActionDeny, Reason: "no"}), "once", "denied", "deploy")

	var mu sync.Mutex
	got := map[string][]string{} // pendingId: the holders it was handed to
	var g errgroup.Group
	for i, s := range []*gate.Service{a, a, b, b} {
		g.Go(func() error {
			for {
				reply, err := s.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, Max: 3, WaitMs: 500, LeaseMs: 60_000, By: fmt.Sprint("x", i)})
				if err != nil {
					return err
				}
				if len(reply.Calls) == 0 {
					return nil // nothing more within half a second
				}
				mu.Lock()
				for _, c := range reply.Calls {
					e := c.Entry
					got[e.PendingID] = append(got[e.PendingID], e.Lease.Holder)
					assert.Equal(t, machine.StateExecuting, e.Status)
					assert.Equal(t, 1, e.ExecutionAttempts)
					assert.Equal(t, fmt.Sprintf("exec/x%d", i), e.Lease.Holder, "claimed for the executor that asked, under its credential's name")
				}
				mu.Unlock()
			}
		})
	}
	require.NoError(t, g.Wait())
	assert.Len(t, got, n, "every runnable call handed out")
	for id, holders := range got {
		assert.True(t, want[id], "%s handed out", id)
		assert.Len(t, holders, 1, "%s handed to %v", id, holders)
	}
	for _, e := range []*machine.Entry{other, cancelled, asked, denied} {
		cur, err := a.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
		require.NoError(t, err)
		assert.NotEqual(t, machine.StateExecuting, cur.Status, e.PendingID)
	}
}

// TestTakeWork_WaitsForAnApproval: an executor waiting for work gets a
// call as soon as it is approved, not at the end of its wait.
func TestTakeWork_WaitsForAnApproval(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour})
	e := submitCall(t, s, "wait", "c1", "deploy")
	type taken struct {
		calls []*machine.Entry
		after time.Duration
	}
	done := make(chan taken, 1)
	start := time.Now()
	go func() {
		calls := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: wire.MaxWorkWait.Milliseconds()})
		done <- taken{calls, time.Since(start)}
	}()
	select {
	case got := <-done:
		t.Fatalf("answered before the approval: %+v", got)
	case <-time.After(100 * time.Millisecond):
	}
	_, err := s.Decide(t.Context(), gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	got := <-done
	require.Len(t, got.calls, 1)
	assert.Equal(t, e.PendingID, got.calls[0].PendingID)
	assert.Less(t, got.after, wire.MaxWorkWait, "handed out when approved")
}

// TestTakeWork_AScheduledCallWhenDue: a call scheduled for later is
// handed out once it is due, not before.
func TestTakeWork_AScheduledCallWhenDue(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun, Delay: 500 * time.Millisecond})
	e := submitCall(t, s, "later", "c1", "deploy")
	require.Equal(t, machine.StateScheduled, e.Status)
	assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}}), "handed out before it was due")
	got := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 10_000})
	require.Len(t, got, 1)
	assert.GreaterOrEqual(t, got[0].LastTransition.At, e.ScheduledExecutionTime, "claimed before it was due")
}

// TestTakeWork_ALostLeaseIsOfferedAgain: a call of an idempotent tool
// whose executor stopped heartbeating is handed to the next executor once
// its lease has run out, as another attempt; on its last attempt it is
// not (the timer ends it), nor is a call of a tool not declared
// idempotent (TestTakeWork_ALostRunOfAToolNotIdempotentIsNotOfferedAgain).
func TestTakeWork_ALostLeaseIsOfferedAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun, MaxExecutionAttempts: 2, Idempotent: true})
	e := submitCall(t, s, "lease", "c1", "deploy")
	first := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 10_000, LeaseMs: 300, By: "gone"})
	require.Len(t, first, 1)

	again := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 10_000, By: "next"})
	require.Len(t, again, 1)
	assert.Equal(t, e.PendingID, again[0].PendingID)
	assert.Equal(t, 2, again[0].ExecutionAttempts)
	assert.Equal(t, machine.EventReclaim, again[0].LastTransition.Event)
	assert.Equal(t, "exec/next", again[0].Lease.Holder)
	assert.GreaterOrEqual(t, again[0].LastTransition.At, first[0].Lease.ExpiresAt, "reclaimed before the lease ran out")

	// Its last attempt's lease runs out too: nobody gets it again.
	_, err := s.Heartbeat(t.Context(), executor, wire.ReportRequest{PendingID: e.PendingID, By: "next", LeaseMs: (200 * time.Millisecond).Milliseconds()})
	require.NoError(t, err)
	assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 1000}), "a third attempt handed out")
}

// TestTakeWork_ALostRunOfAToolNotIdempotentIsNotOfferedAgain: its run
// may have started when its executor was lost, so no executor gets it
// again; the timer ends it with its outcome unknown.
func TestTakeWork_ALostRunOfAToolNotIdempotentIsNotOfferedAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun, MaxExecutionAttempts: 2})
	e := submitCall(t, s, "lost", "c1", "deploy")
	first := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 10_000, LeaseMs: 200, By: "gone"})
	require.Len(t, first, 1)
	assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 1000, By: "next"}), "handed out again after a lost lease")
	got, err := s.Timer().AbandonLease(t.Context(), e.PendingID)
	require.NoError(t, err)
	assert.True(t, got.OutcomeUnknown)
	assert.Equal(t, 1, got.ExecutionAttempts)
}

// TestTakeWork_ANewProcessOffersWhatTheBucketHolds: runnable calls
// written while no process served executors are handed out by the first
// that does.
func TestTakeWork_ANewProcessOffersWhatTheBucketHolds(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	writer := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionRun}, nil
	})})
	var ids []string
	for i := range 3 {
		ids = append(ids, submitCall(t, writer, "restart", fmt.Sprint("c", i), "deploy").PendingID)
	}
	got := take(t, workService(t, env, machine.Verdict{Action: machine.ActionRun}), wire.WorkRequest{Tools: []string{"deploy"}, Max: 10})
	var gotIDs []string
	for _, e := range got {
		gotIDs = append(gotIDs, e.PendingID)
	}
	assert.Equal(t, ids, gotIDs, "every one, oldest first")
}

// TestTakeWork_Refusals: only an executor takes work, and a request is
// checked before anything is claimed.
func TestTakeWork_Refusals(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	e := submitCall(t, s, "refused", "c1", "deploy")
	agent := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	_, err := s.TakeWork(t.Context(), agent, wire.WorkRequest{Tools: []string{"deploy"}, LeaseMs: 1000})
	assert.ErrorIs(t, err, machine.ErrForbidden)
	for _, tc := range []struct {
		r    wire.WorkRequest
		want string
	}{
		{wire.WorkRequest{LeaseMs: 1000}, "tools: required"},
		{wire.WorkRequest{Tools: []string{"deploy", "a.b"}, LeaseMs: 1000}, `tools: "a.b" is not a tool name`},
		{wire.WorkRequest{Tools: []string{"deploy"}, Max: wire.MaxWorkBatch + 1, LeaseMs: 1000}, "max: 257: want 1 to 256"},
		{wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 60_000, LeaseMs: 1000}, "waitMs: 60000: want 0 to 20000"},
		{wire.WorkRequest{Tools: []string{"deploy"}}, "leaseMs: 0: a lease must be positive"},
	} {
		_, err := s.TakeWork(t.Context(), executor, tc.r)
		assert.ErrorIs(t, err, machine.ErrInvalid, tc.want)
		assert.ErrorContains(t, err, tc.want)
	}
	cur, err := s.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.NotEqual(t, machine.StateExecuting, cur.Status, "nothing claimed")
}

// TestTakeWork_AClaimWhoseAnswerWasLostIsHandedAgain: a call claimed for
// an executor that never had the answer (the connection broke) is handed
// to it again, as claimed, once the answer would have arrived, unless it
// says it has the call in hand; no other executor gets it.
func TestTakeWork_AClaimWhoseAnswerWasLostIsHandedAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	e := submitCall(t, s, "lost", "c1", "deploy")
	lost := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 10_000, By: "x"})
	require.Len(t, lost, 1, "claimed, and the answer lost")

	assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, By: "x"}), "handed again before its answer could have come")
	var again []wire.WorkClaim
	bustest.Eventually(t, 10*time.Second, 50*time.Millisecond, "handed again", func() (bool, any) {
		assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, By: "x", Running: []string{e.PendingID}}), "handed again while in hand")
		assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, By: "y"}), "handed to another executor")
		reply, err := s.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, By: "x", LeaseMs: 60_000})
		require.NoError(t, err)
		again = reply.Calls
		return len(again) == 1, again
	})
	assert.True(t, again[0].Again, "marked as handed again")
	assert.Equal(t, e.PendingID, again[0].Entry.PendingID)
	assert.Equal(t, 1, again[0].Entry.ExecutionAttempts, "the same attempt")
	assert.Equal(t, lost[0].Lease.Holder, again[0].Entry.Lease.Holder)
	assert.Equal(t, lost[0].LastAttemptTime, again[0].RunnableSince, "its lease counts from its claim")
}

// TestTakeWork_AClaimWhoseAnswerWasLostPastItsLeaseIsHandedAgain: the
// executor asks again only after the lease of the claim it never had ran
// out; it does not name the call, so the attempt never started: it is
// handed to it again, the same attempt under a fresh lease, though its
// tool is not declared idempotent.
func TestTakeWork_AClaimWhoseAnswerWasLostPastItsLeaseIsHandedAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	e := submitCall(t, s, "lapsed", "c1", "deploy")
	lost := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 10_000, LeaseMs: 100, By: "x"})
	require.Len(t, lost, 1, "claimed, and the answer lost")
	var again []wire.WorkClaim
	bustest.Eventually(t, 10*time.Second, 50*time.Millisecond, "handed again", func() (bool, any) {
		reply, err := s.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, By: "x", LeaseMs: 60_000})
		require.NoError(t, err)
		again = reply.Calls
		return len(again) == 1, again
	})
	assert.True(t, again[0].Again)
	assert.Equal(t, e.PendingID, again[0].Entry.PendingID)
	assert.Equal(t, 1, again[0].Entry.ExecutionAttempts, "the same attempt")
	assert.Greater(t, again[0].Entry.Lease.ExpiresAt, time.Now().Add(30*time.Second).UnixMilli(), "under a fresh lease")
	_, err := s.Timer().AbandonLease(t.Context(), e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict, "not lost: its lease is live again")
}

// TestTakeWork_AWithdrawalEndsOnlyItsExecutorsWaits: an executor's
// withdrawal ends its own requests that wait, with no call, and leaves
// the calls that come after to others; another credential's withdrawal
// under the same ID ends nothing of it.
func TestTakeWork_AWithdrawalEndsOnlyItsExecutorsWaits(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	other := gate.Actor{Name: "other-exec", Roles: []wire.Role{wire.RoleExecutor}}
	wait := func(a gate.Actor) <-chan *wire.WorkReply {
		answered := make(chan *wire.WorkReply, 1)
		go func() {
			reply, err := s.TakeWork(t.Context(), a, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: wire.MaxWorkWait.Milliseconds(), LeaseMs: time.Minute.Milliseconds(), By: "x1"})
			assert.NoError(t, err)
			answered <- reply
		}()
		return answered
	}
	withdraw := func(a gate.Actor) {
		t.Helper()
		reply, err := s.TakeWork(t.Context(), a, wire.WorkRequest{Tools: []string{"deploy"}, LeaseMs: 1, By: "x1", Withdraw: true})
		require.NoError(t, err)
		assert.Empty(t, reply.Calls, "a withdrawal claims nothing")
	}

	mine := wait(executor)
	// The other credential's withdrawals, while executor's request begins
	// to wait and after, end nothing of it: it is still there to take the
	// call.
	for range 50 {
		withdraw(other)
	}
	submitCall(t, s, "withdraw", "first", "deploy")
	select {
	case reply := <-mine:
		require.Len(t, reply.Calls, 1, "still waiting after another's withdrawal")
	case <-time.After(10 * time.Second):
		t.Fatal("the request never took the call")
	}

	// Its own withdrawal ends its wait at once, with nothing; the call
	// that comes after is there for the next request.
	mine = wait(executor)
	var reply *wire.WorkReply
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the request withdrawn", func() (bool, any) {
		withdraw(executor) // the request may not have begun to wait yet
		select {
		case reply = <-mine:
			return true, nil
		default:
			return false, "still waiting"
		}
	})
	assert.Empty(t, reply.Calls)
	submitCall(t, s, "withdraw", "second", "deploy")
	got := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 5000, By: "x2"})
	require.Len(t, got, 1)
	assert.Equal(t, "withdraw.second", got[0].PendingID)
}

// TestTakeWork_ARequestThatBeginsAfterItsWithdrawalClaimsNothing: an
// executor's last request for work, sent before its withdrawal, may
// begin after it (each request is handled on a goroutine of its own): it
// ends at once with nothing, and the call that comes after goes to
// another executor. The next request of that name waits as any does.
func TestTakeWork_ARequestThatBeginsAfterItsWithdrawalClaimsNothing(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	_, err := s.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, LeaseMs: 1, By: "x1", Withdraw: true})
	require.NoError(t, err)
	from := time.Now()
	late := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: wire.MaxWorkWait.Milliseconds(), By: "x1"})
	assert.Empty(t, late)
	assert.Less(t, time.Since(from), wire.MaxWorkWait/2, "the late request waited")
	submitCall(t, s, "late", "first", "deploy")
	got := take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 5000, By: "x2"})
	require.Len(t, got, 1, "the call waits for another executor")
	assert.Equal(t, "late.first", got[0].PendingID)

	next := make(chan []*machine.Entry, 1)
	go func() {
		next <- take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: wire.MaxWorkWait.Milliseconds(), By: "x1"})
	}()
	submitCall(t, s, "late", "second", "deploy")
	select {
	case got := <-next:
		require.Len(t, got, 1, "a later request of x1 waits, and takes the call")
	case <-time.After(wire.MaxWorkWait + 5*time.Second):
		t.Fatal("x1's next request never answered")
	}
}

// TestTakeWork_AWithdrawalReachesEveryProcess: an executor's requests
// wait on whichever process they reached; its withdrawal, through any
// one, ends them on every one that hears of withdrawals.
func TestTakeWork_AWithdrawalReachesEveryProcess(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	run := machine.Verdict{Action: machine.ActionRun}
	one, two := workService(t, env, run), workService(t, env, run)
	for _, s := range []*gate.Service{one, two} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Runtime().FollowWithdrawals(ctx) }()
		t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	}
	answered := make(chan *wire.WorkReply, 1)
	go func() {
		reply, err := two.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: wire.MaxWorkWait.Milliseconds(), LeaseMs: time.Minute.Milliseconds(), By: "x1"})
		assert.NoError(t, err)
		answered <- reply
	}()
	var reply *wire.WorkReply
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the request on the other process withdrawn", func() (bool, any) {
		// Through the first process; the request may not wait yet.
		_, err := one.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, LeaseMs: 1, By: "x1", Withdraw: true})
		require.NoError(t, err)
		select {
		case reply = <-answered:
			return true, nil
		default:
			return false, "still waiting"
		}
	})
	assert.Empty(t, reply.Calls, "withdrawn, it claimed nothing")
}

// waitingRequest waits until a request for work of tool waits at s.
func waitingRequest(t *testing.T, s *gate.Service, tool string) {
	t.Helper()
	bustest.Eventually(t, 10*time.Second, time.Millisecond, fmt.Sprintf("a request for work of %s waits", tool), func() (bool, any) { n := waiting(s, tool); return n > 0, n })
}

// waiting counts the requests for work of tool that wait at s as
// commands would find them: it reserves each, then hands them back.
func waiting(s *gate.Service, tool string) int {
	var reserved []func(*machine.Entry)
	for {
		handOver, ok := gate.ReserveTaker(s, tool)
		if !ok {
			break
		}
		reserved = append(reserved, handOver)
	}
	for _, handOver := range reserved {
		handOver(nil)
	}
	return len(reserved)
}

// TestTakeWork_AnApprovalClaimsForTheExecutorThatWaits: the approval of
// a call an executor waits for claims it for that executor in the same
// write, and answers the executor with it; no other executor is offered
// it.
func TestTakeWork_AnApprovalClaimsForTheExecutorThatWaits(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour})
	e := submitCall(t, s, "merged", "c1", "deploy")
	done := make(chan []*machine.Entry, 1)
	go func() {
		done <- take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: wire.MaxWorkWait.Milliseconds(), By: "w-1"})
	}()
	waitingRequest(t, s, "deploy")

	decided, err := s.Decide(t.Context(), gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateExecuting, decided.Status, "claimed in the approval's write")
	require.NotNil(t, decided.PriorTransition)
	assert.Equal(t, machine.EventApprove, decided.PriorTransition.Event)
	calls := <-done
	require.Len(t, calls, 1)
	assert.Equal(t, e.PendingID, calls[0].PendingID)
	assert.Equal(t, machine.StateExecuting, calls[0].Status)
	assert.Equal(t, decided.Lease, calls[0].Lease)
	assert.Equal(t, "exec/w-1", calls[0].Lease.Holder)
	assert.Empty(t, take(t, s, wire.WorkRequest{Tools: []string{"deploy"}, By: "w-2"}), "offered to another executor")
}

// TestTakeWork_ACallHandedAsTheRequestAnswersIsInTheAnswer: a request
// that a decision reserved answers with the call the decision claimed
// for it, whether the claim comes as it answers (woken by a call of the
// queue, and claiming it), or after.
func TestTakeWork_ACallHandedAsTheRequestAnswersIsInTheAnswer(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	for _, handedFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("handed first ", handedFirst), func(t *testing.T) {
			done := make(chan []*machine.Entry, 1)
			go func() {
				done <- take(t, s, wire.WorkRequest{Tools: []string{"build"}, Max: 2, WaitMs: wire.MaxWorkWait.Milliseconds(), By: "w-1"})
			}()
			var handOver func(*machine.Entry)
			bustest.Eventually(t, 10*time.Second, time.Millisecond, "the request for work waits", func() (bool, any) {
				var ok bool
				handOver, ok = gate.ReserveTaker(s, "build")
				return ok, "no request for work of build"
			})
			// A runnable call wakes the request, which claims it and
			// answers, while it is reserved.
			queued := submitCall(t, s, "handed", fmt.Sprint("queued-", handedFirst), "build")
			handed := &machine.Entry{PendingID: "handed." + fmt.Sprint(handedFirst), Status: machine.StateExecuting}
			if handedFirst {
				handOver(handed)
			}
			var calls []*machine.Entry
			select {
			case calls = <-done:
				require.True(t, handedFirst, "answered while a decision was claiming a call for it")
			case <-time.After(100 * time.Millisecond):
				require.False(t, handedFirst, "no answer 100ms after the claim")
				handOver(handed)
				calls = <-done
			}
			var ids []string
			for _, c := range calls {
				ids = append(ids, c.PendingID)
			}
			assert.Contains(t, ids, handed.PendingID, "the call claimed for the request")
			if !slices.Contains(ids, queued.PendingID) {
				// Handed while it still waited: the queued call is another's.
				assert.Len(t, take(t, s, wire.WorkRequest{Tools: []string{"build"}, By: "w-2"}), 1)
			}
		})
	}
}

// TestTakeWork_ACallLetRunIsClaimedAsItIsSubmitted: a call the policy
// lets run at once, of a tool an executor waits for, is created claimed
// for that executor and answers its request; the agent's retry of the
// submit hands it to nobody again.
func TestTakeWork_ACallLetRunIsClaimedAsItIsSubmitted(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	waiting := func() chan []wire.WorkClaim {
		done := make(chan []wire.WorkClaim, 1)
		go func() {
			reply, err := s.TakeWork(t.Context(), executor, wire.WorkRequest{Tools: []string{"deploy"}, WaitMs: 500, LeaseMs: time.Minute.Milliseconds(), By: "w-1"})
			assert.NoError(t, err)
			done <- reply.Calls
		}()
		waitingRequest(t, s, "deploy")
		return done
	}

	done := waiting()
	e := submitCall(t, s, "submit-claimed", "c1", "deploy")
	assert.Equal(t, machine.StateExecuting, e.Status, "created claimed")
	calls := <-done
	require.Len(t, calls, 1)
	assert.Equal(t, e.PendingID, calls[0].Entry.PendingID)
	assert.Equal(t, "exec/w-1", calls[0].Entry.Lease.Holder)
	assert.Equal(t, e.RequestedAt, calls[0].RunnableSince, "runnable since it was submitted")

	done = waiting()
	again := submitCall(t, s, "submit-claimed", "c1", "deploy")
	assert.Equal(t, e.Lease, again.Lease)
	assert.Empty(t, <-done, "the retry's answer handed the call again")
}

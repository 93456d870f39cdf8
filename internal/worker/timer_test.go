package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// waitFor is how long a test waits for something the timer should do
// within a fraction of a second; generous for -race on two cores.
const waitFor = 10 * time.Second

// startEnv starts a single server and the relay, whose events the timer
// learns deadlines from.
func startEnv(t *testing.T) *bustest.Env {
	t.Helper()
	env := bustest.Start(t, bustest.Topology{Name: "single", Replicas: 1})
	bustest.RunRelay(t, env.JS)
	return env
}

// startClock returns the test's clock, stopped at the present: the
// timers and machines of the test tell the time by it, and the test moves
// it past the deadlines.
func startClock() *toolgatetest.Clock { return toolgatetest.FixedClock(time.Now()) }

// startTimer runs a Timer on clk until the returned stop is called or the
// test ends; stop waits for Run to return and checks it returned nil.
func startTimer(t *testing.T, env *bustest.Env, clk *toolgatetest.Clock, opts ...worker.TimerOption) (stop func()) {
	t.Helper()
	return startTimerWith(t, env, machine.New(env.Store, machine.WithClock(clk.Now)), append(opts, worker.WithClock(clk.Now))...)
}

// startTimerWith runs a Timer moving entries through m, as startTimer
// does.
func startTimerWith(t *testing.T, env *bustest.Env, m worker.Deadlines, opts ...worker.TimerOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.NewTimer(env.Conn, env.Buckets, m, bustest.Logger(), opts...).Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "timer stops cleanly")
			case <-time.After(10 * time.Second):
				t.Error("timer did not stop within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// policy is a machine on clk whose every Submit gets verdict v.
func policy(env *bustest.Env, clk *toolgatetest.Clock, v machine.Verdict) *machine.Machine {
	return machine.New(env.Store, machine.WithClock(clk.Now), machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return v, nil
	})))
}

func ask(timeout time.Duration, autoReject bool) machine.Verdict {
	return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: timeout, AutoRejectOnTimeout: autoReject, Reason: "test asks"}
}

func run(delay time.Duration, maxAttempts int) machine.Verdict {
	return machine.Verdict{Action: machine.ActionRun, Delay: delay, MaxExecutionAttempts: maxAttempts, Reason: "test runs"}
}

func submit(t *testing.T, m *machine.Machine, id string) *machine.Entry {
	t.Helper()
	e, err := m.Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "deploy", Arguments: json.RawMessage(`{"env":"staging"}`), CallerBotID: "bot", ConversationID: "timer"})
	require.NoError(t, err)
	return e
}

// waitEntry waits until the entry satisfies ok and returns it.
func waitEntry(t *testing.T, env *bustest.Env, id string, ok func(*machine.Entry) bool, msg string) *machine.Entry {
	t.Helper()
	var e *machine.Entry
	bustest.Eventually(t, waitFor, 5*time.Millisecond, id+": "+msg, func() (bool, any) {
		var err error
		e, _, err = env.Store.Get(t.Context(), id)
		if err != nil {
			return false, err
		}
		return ok(e), e
	})
	return e
}

func hasStatus(s machine.State) func(*machine.Entry) bool {
	return func(e *machine.Entry) bool { return e.Status == s }
}

// relayDrained waits until the relay has published everything written so
// far, so that counting events afterwards can see a duplicate.
func relayDrained(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	bustest.WaitRelayed(t, js)
}

// streamMsgs returns every message in stream.
func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			continue // a gap: removed from a work queue
		}
		msgs = append(msgs, msg)
	}
	return msgs
}

// eventsByEntry lists each entry's events in TOOL_EVENTS, in order, once
// the relay has caught up.
func eventsByEntry(t *testing.T, js jetstream.JetStream) map[string][]wire.Event {
	t.Helper()
	relayDrained(t, js)
	byID := map[string][]wire.Event{}
	for _, msg := range streamMsgs(t, js, wire.EventsStream) {
		var ev wire.Event
		require.NoError(t, json.Unmarshal(msg.Data, &ev))
		byID[ev.Entry.PendingID] = append(byID[ev.Entry.PendingID], ev)
	}
	return byID
}

// count counts the events of kind ev among evs.
func count(evs []wire.Event, ev machine.Event) int {
	n := 0
	for _, e := range evs {
		if e.Event == ev {
			n++
		}
	}
	return n
}

func TestTimer_TimeoutRejects(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk)
	e := submit(t, policy(env, clk, ask(time.Hour, true)), "reject-me")

	// An hour passes on the clock, not in real time.
	clk.Skip(time.Hour)
	got := waitEntry(t, env, e.PendingID, hasStatus(machine.StateRejectedByTimeout), "rejected by timeout")
	assert.GreaterOrEqual(t, got.DecisionTime, e.ApprovalTimeoutAt, "not rejected before its deadline")
	assert.Equal(t, "timer", got.LastTransition.Actor)
	assert.True(t, got.Overdue)

	evs := eventsByEntry(t, env.JS)[e.PendingID]
	assert.Equal(t, 1, count(evs, machine.EventTimeout), "one timeout event")
}

func TestTimer_NoAutoRejectFlagsOnceAndStaysPending(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk, worker.WithConcurrency(1))
	m := policy(env, clk, ask(200*time.Millisecond, false))
	e := submit(t, m, "flag-me")

	clk.Skip(200 * time.Millisecond)
	waitEntry(t, env, e.PendingID, func(e *machine.Entry) bool { return e.Overdue }, "flagged overdue")
	// Long past the deadline, the call is still the human's to decide. A
	// later deadline acted on proves the timer has been past it: it acts
	// on one deadline at a time (WithConcurrency(1)), earliest first.
	clk.Skip(time.Hour)
	later := submit(t, policy(env, clk, ask(time.Second, true)), "later")
	clk.Skip(time.Second)
	waitEntry(t, env, later.PendingID, hasStatus(machine.StateRejectedByTimeout), "the later call rejected by timeout")
	got, err := m.Get(t.Context(), e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status)
	evs := eventsByEntry(t, env.JS)[e.PendingID]
	assert.Equal(t, 1, count(evs, machine.EventOverdue), "flagged once")
	assert.Equal(t, wire.SubjectApprovalOverdue, evs[len(evs)-1].Type)

	approved, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, approved.Status)
}

func TestTimer_DecisionBeforeDeadlineLeavesItAlone(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk, worker.WithConcurrency(1))
	m := policy(env, clk, ask(time.Second, true))
	approved := submit(t, m, "approved")
	rejected := submit(t, m, "rejected")
	cancelled := submit(t, m, "cancelled")
	control := submit(t, m, "control") // same deadline, nobody answers
	later := submit(t, policy(env, clk, ask(2*time.Second, true)), "later")
	_, err := m.Decide(t.Context(), approved.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	_, err = m.Decide(t.Context(), rejected.PendingID, machine.Decision{Approve: false, By: "alice"})
	require.NoError(t, err)
	_, err = m.Cancel(t.Context(), cancelled.PendingID, "agent", "conversation ended")
	require.NoError(t, err)

	// Once the later call is rejected, the timer, acting on one deadline
	// at a time (WithConcurrency(1)) and the earliest first, is done with
	// the four before it.
	clk.Skip(2 * time.Second)
	waitEntry(t, env, later.PendingID, hasStatus(machine.StateRejectedByTimeout), "the later call rejected by timeout")
	waitEntry(t, env, control.PendingID, hasStatus(machine.StateRejectedByTimeout), "control rejected by timeout")
	events := eventsByEntry(t, env.JS)
	for id, want := range map[string]machine.State{
		approved.PendingID:  machine.StateApproved,
		rejected.PendingID:  machine.StateRejectedByUser,
		cancelled.PendingID: machine.StateCancelled,
	} {
		got, err := m.Get(t.Context(), id)
		require.NoError(t, err)
		assert.Equal(t, want, got.Status, id)
		assert.Zero(t, count(events[id], machine.EventTimeout)+count(events[id], machine.EventOverdue), id)
	}
}

// claimed submits a call that runs at once and claims it for a lease,
// as an executor would, and returns the entry as claimed.
func claimed(t *testing.T, env *bustest.Env, clk *toolgatetest.Clock, id string, maxAttempts int, lease time.Duration) *machine.Entry {
	t.Helper()
	m := policy(env, clk, run(0, maxAttempts))
	e := submit(t, m, id)
	e, err := m.Claim(t.Context(), e.PendingID, "ghost-executor", lease)
	require.NoError(t, err)
	return e
}

func TestTimer_LeaseExpiryOnLastAttemptFails(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk)
	e := claimed(t, env, clk, "abandon", 1, time.Hour)

	clk.Skip(time.Hour)
	got := waitEntry(t, env, e.PendingID, hasStatus(machine.StateCompletedFailure), "failed")
	assert.Contains(t, got.Error, "lost its lease")
	assert.Nil(t, got.Lease)
	assert.GreaterOrEqual(t, got.LastTransition.At, e.Lease.ExpiresAt)
	evs := eventsByEntry(t, env.JS)[e.PendingID]
	assert.Equal(t, 1, count(evs, machine.EventFail))
	assert.Equal(t, "timer", evs[len(evs)-1].Actor)
}

func TestTimer_RenewedLeaseReschedules(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk)
	const lease = 2 * time.Second
	e := claimed(t, env, clk, "renewed", 1, lease)
	m := machine.New(env.Store, machine.WithClock(clk.Now))

	// Renewed every second of the clock, a lease of 2s never runs out,
	// though the clock goes well past the lease the timer first knew of.
	last := e
	for range 4 {
		clk.Skip(time.Second)
		var err error
		last, err = m.Heartbeat(t.Context(), e.PendingID, "ghost-executor", lease)
		require.NoError(t, err, "failed while its lease was being renewed")
	}

	// The executor goes quiet: the renewed lease runs out and the call,
	// on its last attempt, fails, not before.
	clk.Skip(lease)
	got := waitEntry(t, env, e.PendingID, hasStatus(machine.StateCompletedFailure), "failed")
	assert.GreaterOrEqual(t, got.LastTransition.At, last.Lease.ExpiresAt, "failed before the lease ran out")
}

// deadlines is one of each kind of deadline, all due at about the same
// time: a timeout that rejects, one that flags, and the lease of a call
// on its last attempt; and last, a timeout due after all of them (for
// waitPast).
type deadlines struct {
	reject, flag, abandon []*machine.Entry
	last                  *machine.Entry
}

func submitDeadlines(t *testing.T, env *bustest.Env, clk *toolgatetest.Clock, n int, in time.Duration) *deadlines {
	t.Helper()
	var d deadlines
	for i := range n {
		// Spread over [in, 2in), so that, the clock moved past them at
		// once, some are acted on while others wait for their turn.
		at := in + time.Duration(i)*in/time.Duration(max(n, 1))
		d.reject = append(d.reject, submit(t, policy(env, clk, ask(at, true)), fmt.Sprint("reject-", i)))
		d.flag = append(d.flag, submit(t, policy(env, clk, ask(at, false)), fmt.Sprint("flag-", i)))
		d.abandon = append(d.abandon, claimed(t, env, clk, fmt.Sprint("abandon-", i), 1, at))
	}
	d.last = submit(t, policy(env, clk, ask(2*in, true)), "last")
	return &d
}

// waitFired waits until every deadline in d was acted on.
func (d *deadlines) waitFired(t *testing.T, env *bustest.Env) {
	t.Helper()
	for _, e := range d.reject {
		waitEntry(t, env, e.PendingID, hasStatus(machine.StateRejectedByTimeout), "rejected")
	}
	for _, e := range d.flag {
		waitEntry(t, env, e.PendingID, func(e *machine.Entry) bool { return e.Overdue }, "flagged")
	}
	for _, e := range d.abandon {
		waitEntry(t, env, e.PendingID, hasStatus(machine.StateCompletedFailure), "failed")
	}
}

// assertOnce checks that every deadline in d was acted on exactly once:
// one event per timeout and per failure.
func (d *deadlines) assertOnce(t *testing.T, env *bustest.Env) {
	t.Helper()
	events := eventsByEntry(t, env.JS)
	for _, e := range d.reject {
		assert.Equal(t, 1, count(events[e.PendingID], machine.EventTimeout), "timeouts of %s", e.PendingID)
	}
	for _, e := range d.flag {
		assert.Equal(t, 1, count(events[e.PendingID], machine.EventOverdue), "overdue flags of %s", e.PendingID)
	}
	for _, e := range d.abandon {
		assert.Equal(t, 1, count(events[e.PendingID], machine.EventFail), "failures of %s", e.PendingID)
	}
}

// watched passes a timer's commands on to a machine, but for the expiry
// of the call marker, which it records and refuses as a conflict (as if
// decided first): so every timer sees the marker's deadline, and none
// moves it on.
type watched struct {
	m      *machine.Machine
	marker string
	mu     sync.Mutex
	marked bool // Expire(marker) was called
}

func watch(m *machine.Machine, marker string) *watched { return &watched{m: m, marker: marker} }

func (w *watched) Expire(ctx context.Context, id string) (*machine.Entry, error) {
	if id == w.marker {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.marked = true
		return nil, fmt.Errorf("expire %s: %w: held by the test", id, machine.ErrConflict)
	}
	return w.m.Expire(ctx, id)
}

func (w *watched) Remind(ctx context.Context, id string) (*machine.Entry, error) {
	return w.m.Remind(ctx, id)
}

func (w *watched) Escalate(ctx context.Context, id string) (*machine.Entry, error) {
	return w.m.Escalate(ctx, id)
}

func (w *watched) AbandonLease(ctx context.Context, id string) (*machine.Entry, error) {
	return w.m.AbandonLease(ctx, id)
}

// startWatchedTimers runs n timers on clk, one deadline at a time each
// (WithConcurrency(1)), their commands seen by what it returns.
func startWatchedTimers(t *testing.T, env *bustest.Env, clk *toolgatetest.Clock, n int, marker string) []*watched {
	t.Helper()
	var ws []*watched
	for range n {
		w := watch(machine.New(env.Store, machine.WithClock(clk.Now)), marker)
		startTimerWith(t, env, w, worker.WithClock(clk.Now), worker.WithConcurrency(1))
		ws = append(ws, w)
	}
	return ws
}

// waitPast waits until each timer, whose commands ws see, has reached
// the marker's deadline. A timer takes in the revisions in order and
// acts on the earliest deadline first, one at a time: one that has
// reached the marker, whose deadline is after every other, is done with
// every other deadline.
func waitPast(t *testing.T, ws ...*watched) {
	t.Helper()
	for i, w := range ws {
		bustest.Eventually(t, waitFor, 5*time.Millisecond, fmt.Sprintf("timer %d reached the deadline of %s", i+1, w.marker), func() (bool, any) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.marked, "not yet"
		})
	}
}

func TestTimer_RestartFiresPassedDeadlinesAtOnce(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	stop := startTimer(t, env, clk)
	stop()

	d := submitDeadlines(t, env, clk, 4, 200*time.Millisecond)
	clk.Skip(time.Hour) // every deadline passes with no timer running
	for _, e := range append(d.reject, d.flag...) {
		got, _, err := env.Store.Get(t.Context(), e.PendingID)
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, got.Status)
		require.False(t, got.Overdue)
	}

	restarted := time.Now()
	startTimer(t, env, clk)
	d.waitFired(t, env)
	assert.Less(t, time.Since(restarted), 5*time.Second, "overdue deadlines fire as soon as the timer is back")
	d.assertOnce(t, env)
}

func TestTimer_TwoTimersActOnceEach(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	timers := startWatchedTimers(t, env, clk, 2, machine.PendingID("timer", "last"))

	d := submitDeadlines(t, env, clk, 10, 300*time.Millisecond)
	clk.Skip(600 * time.Millisecond)
	d.waitFired(t, env)
	// A second firing, which must not land, would have by the time each
	// timer has reached the last deadline.
	waitPast(t, timers...)
	d.assertOnce(t, env)
}

// TestTimer_DecisionsRaceTheDeadline has humans approve calls at the very
// moment two timers reject them: each call ends either approved or rejected
// by timeout, with exactly one event saying which.
func TestTimer_DecisionsRaceTheDeadline(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	timers := startWatchedTimers(t, env, clk, 2, machine.PendingID("timer", "last"))
	const n = 100
	m := policy(env, clk, ask(500*time.Millisecond, true))
	entries := make([]*machine.Entry, n)
	for i := range entries {
		entries[i] = submit(t, m, fmt.Sprint("race-", i))
	}
	submit(t, policy(env, clk, ask(time.Second, true)), "last")
	// The deadlines pass while the humans decide.
	var wg sync.WaitGroup
	for _, e := range entries {
		wg.Go(func() {
			_, err := m.Decide(context.Background(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
			if err != nil {
				assert.ErrorIs(t, err, machine.ErrConflict)
			}
		})
	}
	clk.Skip(time.Second)
	wg.Wait()

	for _, e := range entries {
		waitEntry(t, env, e.PendingID, func(e *machine.Entry) bool { return e.Status != machine.StatePendingApproval }, "decided or timed out")
	}
	// A second firing, which must not land, would have by the time each
	// timer has reached the last deadline.
	waitPast(t, timers...)
	events := eventsByEntry(t, env.JS)
	won := map[machine.State]int{}
	for _, e := range entries {
		got, err := m.Get(t.Context(), e.PendingID)
		require.NoError(t, err)
		won[got.Status]++
		evs := events[e.PendingID]
		approvals, timeouts := count(evs, machine.EventApprove), count(evs, machine.EventTimeout)
		assert.Equal(t, 1, approvals+timeouts, "%s: one decision", e.PendingID)
		switch got.Status {
		case machine.StateApproved:
			assert.Equal(t, 1, approvals, e.PendingID)
		case machine.StateRejectedByTimeout:
			assert.Equal(t, 1, timeouts, e.PendingID)
		default:
			t.Errorf("%s: %s", e.PendingID, got.Status)
		}
	}
	t.Logf("approved %d, timed out %d", won[machine.StateApproved], won[machine.StateRejectedByTimeout])
}

// TestTimer_StartsAgainWhenItCannotStart: a timer that cannot read the
// bucket (its stream is missing) waits and tries again, and works once it
// can, rather than ending its process.
func TestTimer_StartsAgainWhenItCannotStart(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	require.NoError(t, env.JS.DeleteStream(t.Context(), "KV_"+wire.CallsBucket))
	logged := make(logSignal, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	clk := startClock()
	timer := worker.NewTimer(env.Conn, env.Buckets, machine.New(env.Store, machine.WithClock(clk.Now)), slog.New(logged), worker.WithClock(clk.Now))
	go func() { done <- timer.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	var seen []string
	for failed := false; !failed; {
		select {
		case msg := <-logged:
			seen, failed = append(seen, msg), strings.Contains(msg, "starting again")
		case <-time.After(10 * time.Second):
			t.Fatalf("the timer never failed to start and tried again; it logged %q", seen)
		}
	}
	select {
	case <-timer.Loaded():
		t.Fatal("loaded a bucket that is not there")
	default:
	}
	_, err := bus.Provision(t.Context(), env.JS, bus.Topology{Replicas: 1})
	require.NoError(t, err)
	select {
	case <-timer.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not read the bucket once it was there")
	}
	e := submit(t, policy(env, clk, ask(time.Hour, true)), "late-start")
	clk.Skip(time.Hour)
	waitEntry(t, env, e.PendingID, hasStatus(machine.StateRejectedByTimeout), "rejected by timeout")
}

// logSignal is a slog.Handler that sends each record's message, when
// there is room, to whoever waits for it.
type logSignal chan string

func (l logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logSignal) WithGroup(string) slog.Handler            { return l }
func (l logSignal) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}

// TestTimer_RemindsOnceBeforeTheDeadline: with two timers running, a call
// nobody decides is reminded of once, at its reminderAt and before its
// deadline, then times out; a call decided before its reminder is never
// reminded of.
func TestTimer_RemindsOnceBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk)
	startTimer(t, env, clk)
	v := ask(2*time.Hour, true)
	v.ApprovalReminder = time.Hour
	m := policy(env, clk, v)
	decided := submit(t, m, "decided")
	waiting := submit(t, m, "waiting")
	require.Equal(t, waiting.RequestedAt+time.Hour.Milliseconds(), waiting.ReminderAt)
	_, err := m.Decide(t.Context(), decided.PendingID, machine.Decision{Approve: false, By: "alice"})
	require.NoError(t, err)

	clk.Skip(time.Hour)
	waitEntry(t, env, waiting.PendingID, func(e *machine.Entry) bool { return e.Reminded }, "reminded")
	clk.Skip(time.Hour)
	got := waitEntry(t, env, waiting.PendingID, hasStatus(machine.StateRejectedByTimeout), "rejected by timeout")
	assert.True(t, got.Reminded)
	events := eventsByEntry(t, env.JS)
	evs := events[waiting.PendingID]
	require.Equal(t, 1, count(evs, machine.EventRemind), "reminded once: %v", evs)
	var remind, timeout wire.Event
	for _, ev := range evs {
		switch ev.Event {
		case machine.EventRemind:
			remind = ev
		case machine.EventTimeout:
			timeout = ev
		}
	}
	assert.Equal(t, wire.SubjectApprovalReminder, remind.Type)
	assert.GreaterOrEqual(t, remind.At, waiting.ReminderAt, "not before its reminderAt")
	assert.Less(t, remind.At, waiting.ApprovalTimeoutAt, "before the deadline")
	assert.Less(t, remind.Revision, timeout.Revision, "then the timeout")
	assert.True(t, worker.Notifies(&remind), "humans hear of it")
	assert.Zero(t, count(events[decided.PendingID], machine.EventRemind), "a call decided first is not reminded of")
}

// TestTimer_EscalatesEachTierOnceThenTimesOut: with two timers running,
// a call nobody decides reaches each escalation tier once, in order and
// at its time, widening who may decide, then times out; the tier's
// approver may decide once it is reached.
func TestTimer_EscalatesEachTierOnceThenTimesOut(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	clk := startClock()
	startTimer(t, env, clk)
	startTimer(t, env, clk)
	v := ask(3*time.Hour, true)
	v.Approvers = []string{"alice"}
	v.Escalate = []machine.EscalationTier{{After: time.Hour, To: []string{"oncall"}}, {After: 2 * time.Hour, To: []string{"cto"}}}
	m := policy(env, clk, v)
	waiting := submit(t, m, "waiting")
	answered := submit(t, m, "answered")

	clk.Skip(time.Hour)
	got := waitEntry(t, env, answered.PendingID, func(e *machine.Entry) bool { return e.Escalated == 1 }, "escalated to oncall")
	assert.Equal(t, []string{"alice", "oncall"}, got.Deciders())
	_, err := m.Decide(t.Context(), answered.PendingID, machine.Decision{Approve: true, By: "oncall"})
	require.NoError(t, err, "the tier reached may decide")

	clk.Skip(time.Hour)
	waitEntry(t, env, waiting.PendingID, func(e *machine.Entry) bool { return e.Escalated == 2 }, "escalated to cto")
	clk.Skip(time.Hour)
	got = waitEntry(t, env, waiting.PendingID, hasStatus(machine.StateRejectedByTimeout), "rejected by timeout")
	assert.Equal(t, 2, got.Escalated)
	events := eventsByEntry(t, env.JS)
	evs := events[waiting.PendingID]
	require.Equal(t, 2, count(evs, machine.EventEscalate), "each tier once: %v", evs)
	var tiers []wire.Event
	for _, ev := range evs {
		if ev.Event == machine.EventEscalate {
			tiers = append(tiers, ev)
		}
	}
	for i, ev := range tiers {
		assert.Equal(t, wire.SubjectApprovalEscalated, ev.Type)
		assert.GreaterOrEqual(t, ev.At, waiting.Escalations[i].At, "tier %d not before its time", i+1)
		assert.True(t, worker.Notifies(&ev), "humans hear of it")
	}
	assert.Contains(t, tiers[1].Reason, "to cto")
	assert.Equal(t, 1, count(events[answered.PendingID], machine.EventEscalate), "a call decided escalates no further")
}

// flakyRetirer retires as bucketRetirer does, records every call to
// Retire in order, fails the first one for the id fail as an archive
// out of reach would, and finds the key of the id gone purged, as if
// another timer had retired it just before.
type flakyRetirer struct {
	bucketRetirer
	kv         jetstream.KeyValue
	fail, gone string

	mu    sync.Mutex
	calls []string
}

func (r *flakyRetirer) Retire(ctx context.Context, id string, after time.Duration) error {
	r.mu.Lock()
	r.calls = append(r.calls, id)
	fail := id == r.fail && r.count(id) == 1
	r.mu.Unlock()
	if fail {
		return fmt.Errorf("retire %s: archive: nats: timeout", id)
	}
	if id == r.gone {
		if err := r.kv.Purge(ctx, id); err != nil {
			return err
		}
	}
	return r.bucketRetirer.Retire(ctx, id, after)
}

// count is how many times id was retired; r.mu held.
func (r *flakyRetirer) count(id string) int {
	n := 0
	for _, c := range r.calls {
		if c == id {
			n++
		}
	}
	return n
}

func (r *flakyRetirer) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestTimer_RetiresFinishedCallsInOrder: the timer retires each finished
// call once its window has passed, one at a time in the order they
// finished (WithConcurrency(1)); one whose retirement fails is retried
// after the retry delay; one whose key is gone when its window ends
// (another timer retired it) is tried once and dropped, and one gone
// before the timer read the bucket is not tried. An open call stays.
func TestTimer_RetiresFinishedCallsInOrder(t *testing.T) {
	env := startEnv(t)
	const retain = time.Hour
	// Not stopped: the failed retirement is tried again 50ms later in
	// real time.
	clk := new(toolgatetest.Clock)
	gone := machine.PendingID("timer", "denied-12")
	r := &flakyRetirer{bucketRetirer: bucketRetirer{store: env.Store, now: clk.Now}, kv: env.KV, fail: machine.PendingID("timer", "denied-05"), gone: gone}
	deny := policy(env, clk, machine.Verdict{Action: machine.ActionDeny, Reason: "test denies"})
	open := submit(t, policy(env, clk, ask(2*time.Hour, true)), "open")
	goneBefore := submit(t, deny, "gone-before").PendingID
	require.NoError(t, env.KV.Purge(t.Context(), goneBefore), "retired by another timer")

	timer := worker.NewTimer(env.Conn, env.Buckets, machine.New(env.Store, machine.WithClock(clk.Now)), bustest.Logger(),
		worker.WithRetention(retain, r), worker.WithConcurrency(1), worker.WithRetryDelay(50*time.Millisecond), worker.WithClock(clk.Now))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- timer.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-timer.Loaded():
	case <-time.After(waitFor):
		t.Fatal("the timer did not read the bucket")
	}

	var ids []string
	for i := range 20 {
		ids = append(ids, submit(t, deny, fmt.Sprintf("denied-%02d", i)).PendingID)
	}
	clk.Skip(retain)

	// Every call retired but the one gone, which was tried.
	bustest.Eventually(t, waitFor, 5*time.Millisecond, "every call retired but the one gone, which was tried", func() (bool, any) {
		retired, seen := r.retired.Load(), r.seen()
		return retired == int64(len(ids)-1) && slices.Contains(seen, gone), fmt.Sprintf("%d retired; Retire called for %v", retired, seen)
	})
	calls := r.seen()
	assert.ElementsMatch(t, append(slices.Clone(ids), r.fail), calls, "each once, the failed one twice, %s not at all", goneBefore)
	retry := slices.Index(calls[slices.Index(calls, r.fail)+1:], r.fail) + slices.Index(calls, r.fail) + 1
	assert.Equal(t, ids, slices.Delete(slices.Clone(calls), retry, retry+1), "in the order they finished")
	for _, id := range ids {
		_, err := env.KV.Get(t.Context(), id)
		assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, id)
	}
	_, err := env.KV.Get(t.Context(), open.PendingID)
	assert.NoError(t, err, "an open call stays")
}

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
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
	"github.com/toolgate/toolgate/worker"
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

// startTimer runs a Timer until the returned stop is called or the test
// ends; stop waits for Run to return and checks it returned nil.
func startTimer(t *testing.T, env *bustest.Env, opts ...worker.TimerOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.NewTimer(env.JS, env.KV, machine.New(env.Store), bustest.Logger(), opts...).Run(ctx)
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

// policy is a machine whose every Submit gets verdict v.
func policy(env *bustest.Env, v machine.Verdict) *machine.Machine {
	return machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
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
	require.Eventually(t, func() bool {
		var err error
		e, _, err = env.Store.Get(t.Context(), id)
		return err == nil && ok(e)
	}, waitFor, 5*time.Millisecond, "%s: %s", id, msg)
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
	startTimer(t, env)
	e := submit(t, policy(env, ask(300*time.Millisecond, true)), "reject-me")

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
	startTimer(t, env)
	m := policy(env, ask(200*time.Millisecond, false))
	e := submit(t, m, "flag-me")

	waitEntry(t, env, e.PendingID, func(e *machine.Entry) bool { return e.Overdue }, "flagged overdue")
	// Long past the deadline, the call is still the human's to decide.
	time.Sleep(500 * time.Millisecond)
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
	startTimer(t, env)
	m := policy(env, ask(time.Second, true))
	approved := submit(t, m, "approved")
	rejected := submit(t, m, "rejected")
	cancelled := submit(t, m, "cancelled")
	control := submit(t, m, "control") // same deadline, nobody answers
	_, err := m.Decide(t.Context(), approved.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	_, err = m.Decide(t.Context(), rejected.PendingID, machine.Decision{Approve: false, By: "alice"})
	require.NoError(t, err)
	_, err = m.Cancel(t.Context(), cancelled.PendingID, "agent", "conversation ended")
	require.NoError(t, err)

	// Once the control is rejected the deadline has passed for all four.
	waitEntry(t, env, control.PendingID, hasStatus(machine.StateRejectedByTimeout), "control rejected by timeout")
	time.Sleep(100 * time.Millisecond)
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
func claimed(t *testing.T, env *bustest.Env, id string, maxAttempts int, lease time.Duration) *machine.Entry {
	t.Helper()
	m := policy(env, run(0, maxAttempts))
	e := submit(t, m, id)
	e, err := m.Claim(t.Context(), e.PendingID, "ghost-executor", lease)
	require.NoError(t, err)
	return e
}

func TestTimer_LeaseExpiryOnLastAttemptFails(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	startTimer(t, env)
	e := claimed(t, env, "abandon", 1, 300*time.Millisecond)

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
	startTimer(t, env)
	const lease = 2 * time.Second
	e := claimed(t, env, "renewed", 1, lease)
	m := machine.New(env.Store)

	// Heartbeats publish no event: the timer learns of each renewal only
	// by reading the entry when the lease it knew of runs out. Renewed
	// every 100ms, a lease of 2s runs out only if a heartbeat stalls for
	// 2s (at load 9 on two cores one took more than 800ms).
	var last *machine.Entry
	for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var err error
		last, err = m.Heartbeat(t.Context(), e.PendingID, "ghost-executor", lease)
		require.NoError(t, err, "failed while its lease was being renewed")
	}

	// The executor goes quiet: the renewed lease runs out and the call,
	// on its last attempt, fails, not before.
	got := waitEntry(t, env, e.PendingID, hasStatus(machine.StateCompletedFailure), "failed")
	assert.GreaterOrEqual(t, got.LastTransition.At, last.Lease.ExpiresAt, "failed before the lease ran out")
}

// deadlines is one of each kind of deadline, all due at about the same
// time: a timeout that rejects, one that flags, and the lease of a call
// on its last attempt.
type deadlines struct {
	reject, flag, abandon []*machine.Entry
}

func submitDeadlines(t *testing.T, env *bustest.Env, n int, in time.Duration) *deadlines {
	t.Helper()
	var d deadlines
	for i := range n {
		// Spread over the next few hundred ms, so that some fall due
		// while others are being acted on.
		at := in + time.Duration(i)*in/time.Duration(max(n, 1))
		d.reject = append(d.reject, submit(t, policy(env, ask(at, true)), fmt.Sprint("reject-", i)))
		d.flag = append(d.flag, submit(t, policy(env, ask(at, false)), fmt.Sprint("flag-", i)))
		d.abandon = append(d.abandon, claimed(t, env, fmt.Sprint("abandon-", i), 1, at))
	}
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

func TestTimer_RestartFiresPassedDeadlinesAtOnce(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	stop := startTimer(t, env)
	stop()

	d := submitDeadlines(t, env, 4, 200*time.Millisecond)
	time.Sleep(600 * time.Millisecond) // every deadline passes with no timer running
	for _, e := range append(d.reject, d.flag...) {
		got, _, err := env.Store.Get(t.Context(), e.PendingID)
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, got.Status)
		require.False(t, got.Overdue)
	}

	restarted := time.Now()
	startTimer(t, env)
	d.waitFired(t, env)
	assert.Less(t, time.Since(restarted), 5*time.Second, "overdue deadlines fire as soon as the timer is back")
	d.assertOnce(t, env)
}

func TestTimer_TwoTimersActOnceEach(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	startTimer(t, env)
	startTimer(t, env)

	d := submitDeadlines(t, env, 10, 300*time.Millisecond)
	d.waitFired(t, env)
	time.Sleep(200 * time.Millisecond) // room for a second firing, which must not land
	d.assertOnce(t, env)
}

// TestTimer_DecisionsRaceTheDeadline has humans approve calls at the very
// moment two timers reject them: each call ends either approved or rejected
// by timeout, with exactly one event saying which.
func TestTimer_DecisionsRaceTheDeadline(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	startTimer(t, env)
	startTimer(t, env)
	const n = 100
	m := policy(env, ask(500*time.Millisecond, true))
	entries := make([]*machine.Entry, n)
	for i := range entries {
		entries[i] = submit(t, m, fmt.Sprint("race-", i))
	}
	// Decide each at its deadline, give or take a few ms.
	var wg sync.WaitGroup
	for i, e := range entries {
		wg.Go(func() {
			time.Sleep(time.Until(time.UnixMilli(e.ApprovalTimeoutAt).Add(time.Duration(i%7-3) * time.Millisecond)))
			_, err := m.Decide(context.Background(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
			if err != nil {
				assert.ErrorIs(t, err, machine.ErrConflict)
			}
		})
	}
	wg.Wait()

	for _, e := range entries {
		waitEntry(t, env, e.PendingID, func(e *machine.Entry) bool { return e.Status != machine.StatePendingApproval }, "decided or timed out")
	}
	time.Sleep(200 * time.Millisecond)
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
	timer := worker.NewTimer(env.JS, env.KV, machine.New(env.Store), slog.New(logged))
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
	e := submit(t, policy(env, ask(300*time.Millisecond, true)), "late-start")
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
	startTimer(t, env)
	startTimer(t, env)
	v := ask(2*time.Second, true)
	v.ApprovalReminder = time.Second
	m := policy(env, v)
	decided := submit(t, m, "decided")
	waiting := submit(t, m, "waiting")
	require.Equal(t, waiting.RequestedAt+1000, waiting.ReminderAt)
	_, err := m.Decide(t.Context(), decided.PendingID, machine.Decision{Approve: false, By: "alice"})
	require.NoError(t, err)

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
	startTimer(t, env)
	startTimer(t, env)
	v := ask(3*time.Second, true)
	v.Approvers = []string{"alice"}
	v.Escalate = []machine.EscalationTier{{After: time.Second, To: []string{"oncall"}}, {After: 2 * time.Second, To: []string{"cto"}}}
	m := policy(env, v)
	waiting := submit(t, m, "waiting")
	answered := submit(t, m, "answered")

	got := waitEntry(t, env, answered.PendingID, func(e *machine.Entry) bool { return e.Escalated == 1 }, "escalated to oncall")
	assert.Equal(t, []string{"alice", "oncall"}, got.Deciders())
	_, err := m.Decide(t.Context(), answered.PendingID, machine.Decision{Approve: true, By: "oncall"})
	require.NoError(t, err, "the tier reached may decide")

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
	const retain = time.Second
	gone := machine.PendingID("timer", "denied-12")
	r := &flakyRetirer{bucketRetirer: bucketRetirer{store: env.Store}, kv: env.KV, fail: machine.PendingID("timer", "denied-05"), gone: gone}
	deny := policy(env, machine.Verdict{Action: machine.ActionDeny, Reason: "test denies"})
	open := submit(t, policy(env, ask(time.Hour, true)), "open")
	goneBefore := submit(t, deny, "gone-before").PendingID
	require.NoError(t, env.KV.Purge(t.Context(), goneBefore), "retired by another timer")

	timer := worker.NewTimer(env.JS, env.KV, machine.New(env.Store), bustest.Logger(),
		worker.WithRetention(retain, r), worker.WithConcurrency(1), worker.WithRetryDelay(50*time.Millisecond))
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

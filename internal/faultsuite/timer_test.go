package faultsuite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestServe_TimerSIGKILLWhileDeadlinesAreDue runs the timer as a process of
// its own, `toolgate serve --roles timer`, against a second process that
// holds the embedded server, the relay and intake. It kills the timer with
// SIGKILL while deadlines of every kind are falling due, lets the rest pass
// while it is down, and starts it again: every deadline is acted on after
// it is back, and none twice (one event per timeout and per lease lost on
// a last attempt).
func TestServe_TimerSIGKILLWhileDeadlinesAreDue(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	startServe(t, "--roles", "relay,intake", "--data", t.TempDir(), "--listen", listen, "--relay-ack-wait", "1s")
	timerArgs := []string{"--roles", "timer", "--nats", "nats://" + listen}
	timer := startServe(t, timerArgs...)

	_, js := servetest.Connect(t, "nats://"+listen)
	kv, err := js.KeyValue(t.Context(), wire.CallsBucket)
	require.NoError(t, err)
	store := bus.NewKVStore(js, kv)
	verdict := func(v machine.Verdict) *machine.Machine {
		return machine.New(store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
			return v, nil
		})))
	}
	submit := func(v machine.Verdict, id string) *machine.Entry {
		e, err := verdict(v).Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "deploy", CallerBotID: "bot", ConversationID: "timer-crash"})
		require.NoError(t, err)
		return e
	}
	ask := func(in time.Duration, autoReject bool) machine.Verdict {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: in, AutoRejectOnTimeout: autoReject}
	}
	run := func(in time.Duration, attempts int) machine.Verdict {
		return machine.Verdict{Action: machine.ActionRun, Delay: in, MaxExecutionAttempts: attempts}
	}
	claimed := func(id string, attempts int, lease time.Duration) *machine.Entry {
		e := submit(run(0, attempts), id)
		e, err := verdict(run(0, attempts)).Claim(t.Context(), e.PendingID, "ghost-executor", lease)
		require.NoError(t, err)
		return e
	}
	status := func(id string) *machine.Entry {
		e, _, err := store.Get(t.Context(), id)
		require.NoError(t, err)
		return e
	}

	// The timer process is up and learning deadlines from the relay.
	probe := submit(ask(100*time.Millisecond, true), "probe")
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the timer process acted", func() (bool, any) {
		e := status(probe.PendingID)
		return e.Status == machine.StateRejectedByTimeout, e.Status
	})

	// Deadlines of every kind, falling due one after another over 1.5s.
	const n = 8
	var reject, flag, abandon []*machine.Entry
	for i := range n {
		in := time.Second + time.Duration(i)*1500*time.Millisecond/n
		reject = append(reject, submit(ask(in, true), fmt.Sprint("reject-", i)))
		flag = append(flag, submit(ask(in, false), fmt.Sprint("flag-", i)))
		abandon = append(abandon, claimed(fmt.Sprint("abandon-", i), 1, in))
	}
	last := time.UnixMilli(reject[n-1].ApprovalTimeoutAt)

	// Kill it as soon as the first deadline has fired: the rest are due
	// in the next moments.
	bustest.Eventually(t, 30*time.Second, time.Millisecond, "the first deadline fired", func() (bool, any) {
		e := status(reject[0].PendingID)
		return e.Status == machine.StateRejectedByTimeout, e.Status
	})
	timer.kill()
	time.Sleep(time.Until(last.Add(500 * time.Millisecond)))
	unfired := 0
	for _, e := range append(reject, flag...) {
		if got := status(e.PendingID); got.Status == machine.StatePendingApproval && !got.Overdue {
			unfired++
		}
	}
	require.Positive(t, unfired, "the timer was killed after it had done everything")
	t.Logf("%d of %d approval deadlines passed while the timer was down", unfired, 2*n)

	restarted := time.Now()
	startServe(t, timerArgs...)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "every passed deadline fired once the timer was back", func() (bool, any) {
		for _, e := range reject {
			if got := status(e.PendingID); got.Status != machine.StateRejectedByTimeout {
				return false, fmt.Sprintf("%s %s", e.PendingID, got.Status)
			}
		}
		for _, e := range flag {
			if !status(e.PendingID).Overdue {
				return false, fmt.Sprintf("%s not overdue", e.PendingID)
			}
		}
		for _, e := range abandon {
			if got := status(e.PendingID); got.Status != machine.StateCompletedFailure {
				return false, fmt.Sprintf("%s %s", e.PendingID, got.Status)
			}
		}
		return true, nil
	})
	t.Logf("every passed deadline acted on %s after the restart", time.Since(restarted).Round(time.Millisecond))

	// None twice: give a second firing room to land, then count.
	time.Sleep(300 * time.Millisecond)
	events := timerEvents(t, js)
	for _, e := range reject {
		assert.Equal(t, 1, events[e.PendingID][machine.EventTimeout], "timeouts of %s", e.PendingID)
	}
	for _, e := range flag {
		assert.Equal(t, 1, events[e.PendingID][machine.EventOverdue], "overdue flags of %s", e.PendingID)
		assert.Equal(t, machine.StatePendingApproval, status(e.PendingID).Status, e.PendingID)
	}
	for _, e := range abandon {
		assert.Equal(t, 1, events[e.PendingID][machine.EventFail], "failures of %s", e.PendingID)
	}
}

// timerEvents counts each entry's events in TOOL_EVENTS by kind, once the
// relay has published everything written so far.
func timerEvents(t *testing.T, js jetstream.JetStream) map[string]map[machine.Event]int {
	t.Helper()
	bustest.WaitRelayed(t, js)
	counts := map[string]map[machine.Event]int{}
	for _, data := range timerStreamData(t, js, wire.EventsStream) {
		ev := decode[wire.Event](t, data)
		if counts[ev.Entry.PendingID] == nil {
			counts[ev.Entry.PendingID] = map[machine.Event]int{}
		}
		counts[ev.Entry.PendingID][ev.Event]++
	}
	return counts
}

func timerStreamData(t *testing.T, js jetstream.JetStream, stream string) [][]byte {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	var data [][]byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := s.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		data = append(data, msg.Data)
	}
	return data
}

package exporter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/metrics/exporter"
	"github.com/toolgate/toolgate/internal/metrics/metricstest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// scriptPolicy names the tools and teams of the scripted run, so that
// its labels are theirs.
const scriptPolicy = `default:
  requiresApprovalTools: [web_search, deploy, send_email]
  readOnlyTools: [read_file]
  rules: {deny: [rm_rf]}
teams:
  research: {}
  ops: {}
`

// evaluator answers by tool: the tools of a scripted run.
var evaluator = machine.EvaluatorFunc(func(_ context.Context, c machine.Call) (machine.Verdict, error) {
	switch c.ToolName {
	case "read_file":
		return machine.Verdict{Action: machine.ActionRun, Reason: "readOnlyTools", Idempotent: true}, nil
	case "rm_rf":
		return machine.Verdict{Action: machine.ActionDeny, Reason: "deny rm_rf"}, nil
	case "send_email":
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: 5 * time.Minute, AutoRejectOnTimeout: false, Reason: "ask"}, nil
	}
	return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: 5 * time.Minute, AutoRejectOnTimeout: true, Reason: "ask"}, nil
})

// startExporter runs an exporter on a registry of its own, its labels
// bound to v, until the test ends, and waits until it is ready.
func startExporter(t *testing.T, env *bustest.Env, v metrics.Vocabulary) (*exporter.Exporter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	x, err := exporter.NewExporter(env.Conn, env.Buckets, reg, exporter.ExporterConfig{}, bustest.Logger())
	require.NoError(t, err)
	x.Metrics().BoundLabels(v)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-x.Ready():
	case err := <-done:
		t.Fatalf("exporter stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("exporter not ready")
	}
	return x, reg
}

// TestExporter_ScriptedRun drives calls through every kind of transition
// and pins each metric's labels and values.
func TestExporter_ScriptedRun(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	bustest.RunRelay(t, env.JS)
	// A durable consumer nobody runs: its lag is every event.
	_, err := env.JS.CreateOrUpdateConsumer(ctx, wire.EventsStream, jetstreamDurable("idle-notifier"))
	require.NoError(t, err)
	x, reg := startExporter(t, env, metricstest.Vocabulary(t, scriptPolicy))

	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	clk := toolgatetest.FixedClock(t0)
	m := machine.New(env.Store, machine.WithClock(clk.Now), machine.WithEvaluator(evaluator))
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	submit := func(id, tool, team string) *machine.Entry {
		at(0)
		e, err := m.Submit(ctx, machine.Call{ToolCallID: id, ToolName: tool, Team: team, CallerBotID: "bot", ConversationID: "conv"})
		require.NoError(t, err)
		return e
	}
	must := func(_ *machine.Entry, err error) { t.Helper(); require.NoError(t, err) }

	ws1 := submit("ws1", "web_search", "research")
	at(3 * time.Second)
	must(m.Decide(ctx, ws1.PendingID, machine.Decision{Approve: true, By: "alice"}))
	at(4 * time.Second)
	must(m.Claim(ctx, ws1.PendingID, "exec-1", time.Minute))
	at(6500 * time.Millisecond)
	must(m.Complete(ctx, ws1.PendingID, machine.Outcome{Holder: "exec-1", Cost: 0.25}))

	ws2 := submit("ws2", "web_search", "research")
	at(20 * time.Second)
	must(m.Decide(ctx, ws2.PendingID, machine.Decision{Approve: true, By: "bob"}))
	at(21 * time.Second)
	must(m.Claim(ctx, ws2.PendingID, "exec-1", time.Minute))
	at(22 * time.Second)
	must(m.Fail(ctx, ws2.PendingID, machine.Outcome{Holder: "exec-1", Error: "boom", Cost: 0.5}))

	d1 := submit("d1", "deploy", "ops")
	at(90 * time.Second)
	must(m.Decide(ctx, d1.PendingID, machine.Decision{Approve: false, By: "alice", Reason: "too risky"}))
	d2 := submit("d2", "deploy", "ops")
	se := submit("se", "send_email", "ops")
	at(5*time.Minute + time.Second)
	must(m.Expire(ctx, d2.PendingID))
	must(m.Expire(ctx, se.PendingID))

	rf := submit("rf", "read_file", "research")
	at(time.Second)
	must(m.Claim(ctx, rf.PendingID, "exec-1", 10*time.Second))
	at(12 * time.Second)
	must(m.Claim(ctx, rf.PendingID, "exec-2", 10*time.Second)) // the first executor's lease ran out
	at(13 * time.Second)
	must(m.Complete(ctx, rf.PendingID, machine.Outcome{Holder: "exec-2"}))

	submit("rm", "rm_rf", "research")
	ws3 := submit("ws3", "web_search", "research") // left pending
	d3 := submit("d3", "deploy", "ops")
	at(10 * time.Second)
	must(m.Cancel(ctx, d3.PendingID, "system", "conversation ended"))

	// A second decision loses: the caller counts the conflict.
	_, err = m.Decide(ctx, d1.PendingID, machine.Decision{Approve: true, By: "bob"})
	require.Error(t, err)
	assert.True(t, x.Metrics().ObserveError(err))
	assert.False(t, x.Metrics().ObserveError(errors.New("unrelated")))
	assert.False(t, x.Metrics().ObserveError(nil))
	// The notifier counts what it sends.
	mx, err := metrics.For(reg)
	require.NoError(t, err)
	require.Same(t, x.Metrics(), mx, "every role of a process shares the registry's metrics")
	mx.Notification("slack", metrics.NotificationSent)
	mx.Notification("slack", metrics.NotificationSent)
	mx.Notification("webhook", metrics.NotificationFailed)

	t.Run("each event counted", func(t *testing.T) {
		last := bustest.WaitRelayed(t, env.JS)
		require.Equal(t, uint64(22), last, "events of the script")
		bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the metrics counted every event", func() (bool, any) {
			got := x.Sequence()
			return got == last, fmt.Sprintf("at event %d of %d", got, last)
		})

		assert.Equal(t, []string{
			`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="deploy"} 1`,
			`toolgate_tool_calls_total{outcome="COMPLETED_FAILURE",tool="web_search"} 1`,
			`toolgate_tool_calls_total{outcome="COMPLETED_SUCCESS",tool="read_file"} 1`,
			`toolgate_tool_calls_total{outcome="COMPLETED_SUCCESS",tool="web_search"} 1`,
			`toolgate_tool_calls_total{outcome="REJECTED_BY_POLICY",tool="rm_rf"} 1`,
			`toolgate_tool_calls_total{outcome="REJECTED_BY_TIMEOUT",tool="deploy"} 1`,
			`toolgate_tool_calls_total{outcome="REJECTED_BY_USER",tool="deploy"} 1`,
		}, metricstest.Counted(t, reg, metrics.NameToolCalls))
		assert.Equal(t, []string{
			`toolgate_transitions_total{from="APPROVED_READY_FOR_EXECUTION",to="EXECUTING"} 2`,
			`toolgate_transitions_total{from="EXECUTING",to="COMPLETED_FAILURE"} 1`,
			`toolgate_transitions_total{from="EXECUTING",to="COMPLETED_SUCCESS"} 2`,
			`toolgate_transitions_total{from="EXECUTING",to="EXECUTING"} 1`,
			`toolgate_transitions_total{from="PENDING_APPROVAL",to="APPROVED_READY_FOR_EXECUTION"} 2`,
			`toolgate_transitions_total{from="PENDING_APPROVAL",to="CANCELLED_BY_SYSTEM"} 1`,
			`toolgate_transitions_total{from="PENDING_APPROVAL",to="PENDING_APPROVAL"} 1`,
			`toolgate_transitions_total{from="PENDING_APPROVAL",to="REJECTED_BY_TIMEOUT"} 1`,
			`toolgate_transitions_total{from="PENDING_APPROVAL",to="REJECTED_BY_USER"} 1`,
			`toolgate_transitions_total{from="SCHEDULED_FOR_EXECUTION",to="EXECUTING"} 1`,
			`toolgate_transitions_total{from="none",to="PENDING_APPROVAL"} 7`,
			`toolgate_transitions_total{from="none",to="REJECTED_BY_POLICY"} 1`,
			`toolgate_transitions_total{from="none",to="SCHEDULED_FOR_EXECUTION"} 1`,
		}, metricstest.Counted(t, reg, metrics.NameTransitions))
		assert.Equal(t, []string{
			`toolgate_approval_response_seconds_count{decision="approved",tool="web_search"} 2`,
			`toolgate_approval_response_seconds_count{decision="rejected",tool="deploy"} 1`,
			`toolgate_approval_response_seconds_sum{decision="approved",tool="web_search"} 23`,
			`toolgate_approval_response_seconds_sum{decision="rejected",tool="deploy"} 90`,
		}, metricstest.Counted(t, reg, metrics.NameApprovalResponse))
		assert.Equal(t, []string{
			`toolgate_approval_timeouts_total{tool="deploy"} 1`,
			`toolgate_approval_timeouts_total{tool="send_email"} 1`,
		}, metricstest.Counted(t, reg, metrics.NameApprovalTimeouts))
		assert.Equal(t, []string{
			`toolgate_execution_seconds_count{outcome="COMPLETED_FAILURE",tool="web_search"} 1`,
			`toolgate_execution_seconds_count{outcome="COMPLETED_SUCCESS",tool="read_file"} 1`,
			`toolgate_execution_seconds_count{outcome="COMPLETED_SUCCESS",tool="web_search"} 1`,
			`toolgate_execution_seconds_sum{outcome="COMPLETED_FAILURE",tool="web_search"} 1`,
			`toolgate_execution_seconds_sum{outcome="COMPLETED_SUCCESS",tool="read_file"} 1`,
			`toolgate_execution_seconds_sum{outcome="COMPLETED_SUCCESS",tool="web_search"} 2.5`,
		}, metricstest.Counted(t, reg, metrics.NameExecution))
		assert.Equal(t, []string{
			`toolgate_execution_attempts_total{tool="read_file"} 2`,
			`toolgate_execution_attempts_total{tool="web_search"} 2`,
		}, metricstest.Counted(t, reg, metrics.NameExecutionAttempts))
		assert.Equal(t, []string{`toolgate_cost_total{team="research",tool="web_search"} 0.75`}, metricstest.Counted(t, reg, metrics.NameCost))
		assert.Equal(t, []string{
			`toolgate_notifications_total{channel="slack",result="sent"} 2`,
			`toolgate_notifications_total{channel="webhook",result="failed"} 1`,
		}, metricstest.Counted(t, reg, metrics.NameNotifications))
		assert.Equal(t, []string{`toolgate_transition_conflicts_total{event="approve"} 1`},
			metricstest.Counted(t, reg, metrics.NameTransitionConflicts))
		assert.Equal(t, 2.0, testutil.ToFloat64(x.Metrics().ToolCalls.WithLabelValues("web_search", string(machine.StateCompletedSuccess)))+
			testutil.ToFloat64(x.Metrics().ToolCalls.WithLabelValues("web_search", string(machine.StateCompletedFailure))))
	})

	t.Run("the consumers' lag", func(t *testing.T) {
		// The relay's consumer is drained; the idle one lags by every event.
		assert.Equal(t, []string{
			`toolgate_consumer_ack_pending_messages{consumer="idle-notifier",stream="TOOL_EVENTS"} 0`,
			`toolgate_consumer_ack_pending_messages{consumer="toolgate-relay",stream="KV_tool_calls"} 0`,
		}, metricstest.Samples(t, reg, metrics.NameConsumerAckPending))
		assert.Equal(t, []string{
			`toolgate_consumer_pending_messages{consumer="idle-notifier",stream="TOOL_EVENTS"} 22`,
			`toolgate_consumer_pending_messages{consumer="toolgate-relay",stream="KV_tool_calls"} 0`,
		}, metricstest.Samples(t, reg, metrics.NameConsumerPending))
	})

	// Pending approvals come from the store: ws3 and the overdue email.
	wantPending := []string{
		`toolgate_pending_approvals{team=""} 0`, // shown from the start, as the teams the policy names are
		`toolgate_pending_approvals{team="ops"} 1`,
		`toolgate_pending_approvals{team="research"} 1`,
	}
	t.Run("pending approvals, from the store", func(t *testing.T) {
		bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the pending gauge", func() (bool, any) {
			got := metricstest.Samples(t, reg, metrics.NamePendingApprovals)
			return slices.Equal(got, wantPending), got
		})
	})

	t.Run("a replica started later", func(t *testing.T) {
		// A replica started now reports the same, though it saw none of the
		// events: the gauge is the fleet's, not one process's counters.
		x2, reg2 := startExporter(t, env, metricstest.Vocabulary(t, scriptPolicy))
		assert.Equal(t, wantPending, metricstest.Samples(t, reg2, metrics.NamePendingApprovals))
		assert.Empty(t, metricstest.Counted(t, reg2, metrics.NameToolCalls), "a new replica counts from when it started")

		at(4 * time.Minute) // before its 5-minute deadline
		_, err := m.Decide(ctx, ws3.PendingID, machine.Decision{Approve: true, By: "alice"})
		require.NoError(t, err)
		for _, r := range []*prometheus.Registry{reg, reg2} {
			bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "one approval pending, for ops", func() (bool, any) {
				got := metricstest.Samples(t, r, metrics.NamePendingApprovals)
				return fmt.Sprint(got) == fmt.Sprint([]string{
					`toolgate_pending_approvals{team=""} 0`,
					`toolgate_pending_approvals{team="ops"} 1`,
					`toolgate_pending_approvals{team="research"} 0`,
				}), got
			})
		}
		last := bustest.WaitRelayed(t, env.JS)
		bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the new replica counted every event", func() (bool, any) {
			got := x2.Sequence()
			return got == last, fmt.Sprintf("at event %d of %d", got, last)
		})
		// The new replica counts events from its start.
		assert.Equal(t, []string{
			`toolgate_approval_response_seconds_count{decision="approved",tool="web_search"} 1`,
			`toolgate_approval_response_seconds_sum{decision="approved",tool="web_search"} 240`,
		}, metricstest.Counted(t, reg2, metrics.NameApprovalResponse))
	})
}

func jetstreamDurable(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy}
}

// TestExporter_LabelsAreOnlyThePolicysNames: agents choose their calls'
// tool and team names; a hundred random ones add one series, other, and a
// name the policy takes up later gets its own from then on.
func TestExporter_LabelsAreOnlyThePolicysNames(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	bustest.RunRelay(t, env.JS)
	engine := metricstest.Vocabulary(t, "default:\n  requiresApprovalTools: [web_search, mcp__github]\nteams:\n  research: {}\n")
	x, reg := startExporter(t, env, engine)
	m := machine.New(env.Store, machine.WithEvaluator(evaluator)) // every one of these asks

	var ids []string
	submit := func(id, tool, team string, cost float64) {
		e, err := m.Submit(ctx, machine.Call{ToolCallID: id, ToolName: tool, Team: team, CallerBotID: "bot", ConversationID: "conv", EstimatedCost: cost})
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, e.Status)
		ids = append(ids, e.PendingID)
	}
	for i := range 100 {
		submit(fmt.Sprintf("r%d", i), fmt.Sprintf("tool_%d_%x", i, rand.Uint64()), fmt.Sprintf("team_%x", rand.Uint64()), 0)
	}
	submit("ws", "web_search", "research", 0)
	submit("gh", "mcp__github__create_issue", "", 0) // named by its server

	wantPending := []string{
		`toolgate_pending_approvals{team="other"} 100`,
		`toolgate_pending_approvals{team="research"} 1`,
		`toolgate_pending_approvals{team=""} 1`,
	}
	slices.Sort(wantPending)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the pending gauge", func() (bool, any) {
		got := metricstest.Samples(t, reg, metrics.NamePendingApprovals)
		return slices.Equal(got, wantPending), got
	})

	for _, id := range ids {
		_, err := m.Cancel(ctx, id, "system", "done")
		require.NoError(t, err)
	}
	last := bustest.WaitRelayed(t, env.JS)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the metrics counted every event", func() (bool, any) {
		got := x.Sequence()
		return got == last, fmt.Sprintf("at event %d of %d", got, last)
	})
	assert.Equal(t, []string{
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="mcp__github"} 1`,
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="other"} 100`,
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="web_search"} 1`,
	}, metricstest.Counted(t, reg, metrics.NameToolCalls))
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the teams seen stay, at 0", func() (bool, any) {
		got := metricstest.Samples(t, reg, metrics.NamePendingApprovals)
		return slices.Equal(got, []string{
			`toolgate_pending_approvals{team=""} 0`,
			`toolgate_pending_approvals{team="other"} 0`,
			`toolgate_pending_approvals{team="research"} 0`,
		}), got
	})

	// The policy takes up a tool and a team: their calls are theirs from
	// then on.
	d, err := policy.Parse([]byte("default:\n  requiresApprovalTools: [web_search, late_tool]\nteams:\n  late_team: {}\n"))
	require.NoError(t, err)
	require.NoError(t, engine.SetDocument(d))
	ids = nil
	submit("late", "late_tool", "late_team", 0)
	submit("late2", "tool_not_named", "late_team", 0)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "late_team's two pending", func() (bool, any) {
		got := metricstest.Samples(t, reg, metrics.NamePendingApprovals)
		return slices.Contains(got, `toolgate_pending_approvals{team="late_team"} 2`), got
	})
	for _, id := range ids {
		_, err := m.Cancel(ctx, id, "system", "done")
		require.NoError(t, err)
	}
	last = bustest.WaitRelayed(t, env.JS)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the metrics counted every event", func() (bool, any) {
		got := x.Sequence()
		return got == last, fmt.Sprintf("at event %d of %d", got, last)
	})
	assert.Equal(t, []string{
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="late_tool"} 1`,
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="mcp__github"} 1`,
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="other"} 101`,
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="web_search"} 1`,
	}, metricstest.Counted(t, reg, metrics.NameToolCalls))
}

// TestServe_MetricLabelsAreThePolicysNames: toolgate serve binds its
// metrics to the policy it follows, for every role: what /metrics serves
// after agents sent random team names is the policy's teams and other.
func TestServe_MetricLabelsAreThePolicysNames(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{
		Roles:  []string{"relay", "intake", "analytics", "http"},
		Policy: "default:\n  requiresApprovalTools: all\nteams:\n  research: {}\n",
	})
	for i := range 20 {
		team := fmt.Sprintf("rnd_team_%x", rand.Uint64())
		if i == 0 {
			team = "research"
		}
		_, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: fmt.Sprintf("c%d", i), ToolName: fmt.Sprintf("rnd_tool_%x", rand.Uint64()),
			Team: team, CallerBotID: "bot", ConversationID: "conv", Arguments: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	var body string
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "pending approvals by team: other 19, research 1", func() (bool, any) {
		resp, err := http.Get(g.HTTPURL + "/metrics")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, `toolgate_pending_approvals{team="other"} 19`) &&
			strings.Contains(body, `toolgate_pending_approvals{team="research"} 1`), body
	})
	assert.NotContains(t, body, "rnd_", "no agent-chosen tool or team is a label value")
}

// TestServe_SeriesStartAtZero: a fresh toolgate's /metrics has, before
// any call, every series whose labels it knows at 0 (the transitions,
// events, channels, requeue reasons; the tools and teams the policy
// names, and other), so that a dashboard shows 0, not "No data".
func TestServe_SeriesStartAtZero(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{
		Roles:  []string{"relay", "intake", "analytics", "http"},
		Policy: "default:\n  requiresApprovalTools: [web_search]\n  rules: {allow: [mcp__github]}\nteams:\n  research: {}\n",
	})
	var body string
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "a pending approvals gauge for research, at 0", func() (bool, any) {
		resp, err := http.Get(g.HTTPURL + "/metrics")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, `toolgate_pending_approvals{team="research"} 0`), body
	})
	for _, want := range []string{
		`toolgate_tool_calls_total{outcome="COMPLETED_SUCCESS",tool="web_search"} 0`,
		`toolgate_tool_calls_total{outcome="CANCELLED_BY_SYSTEM",tool="mcp__github"} 0`,
		`toolgate_tool_calls_total{outcome="REJECTED_BY_POLICY",tool="other"} 0`,
		`toolgate_transitions_total{from="none",to="PENDING_APPROVAL"} 0`,
		`toolgate_transitions_total{from="EXECUTING",to="EXECUTING"} 0`,
		`toolgate_transitions_total{from="SCHEDULED_FOR_EXECUTION",to="CANCELLED_BY_SYSTEM"} 0`,
		`toolgate_approval_response_seconds_count{decision="approved",tool="other"} 0`,
		`toolgate_approval_response_seconds_count{decision="rejected",tool="other"} 0`,
		`toolgate_approval_timeouts_total{tool="web_search"} 0`,
		`toolgate_execution_seconds_count{outcome="COMPLETED_FAILURE",tool="other"} 0`,
		`toolgate_execution_attempts_total{tool="other"} 0`,
		`toolgate_cost_total{team="research",tool="web_search"} 0`,
		`toolgate_cost_total{team="",tool="other"} 0`,
		`toolgate_notifications_total{channel="slack",result="failed"} 0`,
		`toolgate_notifications_total{channel="none",result="skipped"} 0`,
		`toolgate_transition_conflicts_total{event="approve"} 0`,
		`toolgate_requeues_total{reason="lease_expired"} 0`,
		`toolgate_pending_approvals{team=""} 0`,
	} {
		assert.Contains(t, body, want+"\n")
	}
	// Every one is at 0 (nothing happened yet), and none is a tool the
	// policy does not name (Claude Code's built-in ones among them).
	var toolgate int
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "toolgate_") || strings.HasPrefix(line, "toolgate_consumer_") {
			continue
		}
		toolgate++
		assert.True(t, strings.HasSuffix(line, " 0"), "%s", line)
	}
	assert.Greater(t, toolgate, 100)
	assert.NotContains(t, body, `tool="Bash"`)
}

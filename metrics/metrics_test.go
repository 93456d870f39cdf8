package metrics_test

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/metrics/metricstest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
)

// namedTools is a policy that names the tools the tests observe.
const namedTools = "default:\n  requiresApprovalTools: [web_search, deploy]\n"

func TestFor_OneMetricsPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := metrics.For(reg)
	require.NoError(t, err)
	b, err := metrics.For(reg)
	require.NoError(t, err)
	assert.Same(t, a, b)
	c, err := metrics.For(prometheus.NewRegistry())
	require.NoError(t, err)
	assert.NotSame(t, a, c)
	_, err = metrics.New(reg)
	assert.Error(t, err, "registering twice is refused")
}

// TestMetrics_ObserveDecodesRelayedEvents feeds Observe an event as the
// relay writes it, to keep the two in step.
func TestMetrics_ObserveDecodesRelayedEvents(t *testing.T) {
	data := []byte(`{"id":"c.x:3","type":"tool.approval_granted","event":"approve","from":"PENDING_APPROVAL","to":"APPROVED_READY_FOR_EXECUTION",
		"actor":"alice","at":1500,"revision":3,"entry":{"pendingId":"c.x","toolName":"web_search","requestedAt":1000,"decisionTime":1500,"status":"APPROVED_READY_FOR_EXECUTION"}}`)
	var ev wire.Event
	require.NoError(t, json.Unmarshal(data, &ev))
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.BoundLabels(metricstest.Vocabulary(t, namedTools))
	m.Observe(&ev)
	assert.Equal(t, []string{
		`toolgate_approval_response_seconds_count{decision="approved",tool="web_search"} 1`,
		`toolgate_approval_response_seconds_sum{decision="approved",tool="web_search"} 0.5`,
	}, metricstest.Counted(t, reg, metrics.NameApprovalResponse))
	assert.Empty(t, metricstest.Counted(t, reg, metrics.NameToolCalls), "not terminal")
}

// TestMetrics_ObserveCountsEventsThatShareASubjectAlike: events published
// on one subject are one thing to count, whichever of them happened.
func TestMetrics_ObserveCountsEventsThatShareASubjectAlike(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.BoundLabels(metricstest.Vocabulary(t, namedTools))
	entry := &machine.Entry{PendingID: "c.x", ToolName: "deploy"}
	for _, ev := range []machine.Event{
		machine.EventTimeout, machine.EventOverdue,
		machine.EventStart, machine.EventReclaim, machine.EventHeartbeat,
	} {
		to, _ := ev.Target()
		m.Observe(&wire.Event{Event: ev, To: to, Entry: entry})
	}
	assert.Equal(t, []string{`toolgate_approval_timeouts_total{tool="deploy"} 2`}, metricstest.Counted(t, reg, metrics.NameApprovalTimeouts))
	assert.Equal(t, []string{`toolgate_execution_attempts_total{tool="deploy"} 2`}, metricstest.Counted(t, reg, metrics.NameExecutionAttempts), "a heartbeat is no attempt")
}

// TestMetrics_UnboundLabelsAreOther: a Metrics no policy was bound to keeps
// no agent-chosen name at all, and one bound keeps the policy's; TeamLabel
// and NamedTeams, which collectors of their own take their team labels
// from, say the same.
func TestMetrics_UnboundLabelsAreOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	entry := &machine.Entry{PendingID: "c.x", ToolName: "deploy", Team: "ops", Cost: 2, LastAttemptTime: 1000}
	m.Observe(&wire.Event{Event: machine.EventSucceed, From: machine.StateExecuting, To: machine.StateCompletedSuccess, At: 2000, Entry: entry})
	assert.Equal(t, []string{`toolgate_cost_total{team="other",tool="other"} 2`}, metricstest.Counted(t, reg, metrics.NameCost))
	assert.Equal(t, []string{`toolgate_tool_calls_total{outcome="COMPLETED_SUCCESS",tool="other"} 1`}, metricstest.Counted(t, reg, metrics.NameToolCalls))
	assert.Equal(t, metrics.OtherLabel, m.TeamLabel("ops"))
	assert.Equal(t, "", m.TeamLabel(""), "no team is a value of its own")
	assert.Empty(t, m.NamedTeams())

	m.BoundLabels(metricstest.Vocabulary(t, "default: {requiresApprovalTools: [deploy]}\nteams: {ops: {}}\n"))
	m.Observe(&wire.Event{Event: machine.EventSucceed, From: machine.StateExecuting, To: machine.StateCompletedSuccess, At: 2000, Entry: entry})
	assert.Equal(t, []string{
		`toolgate_cost_total{team="ops",tool="deploy"} 2`,
		`toolgate_cost_total{team="other",tool="other"} 2`,
	}, metricstest.Counted(t, reg, metrics.NameCost))
	assert.Equal(t, "ops", m.TeamLabel("ops"))
	assert.Equal(t, metrics.OtherLabel, m.TeamLabel("rnd_team"))
	assert.Equal(t, []string{"ops"}, m.NamedTeams())
}

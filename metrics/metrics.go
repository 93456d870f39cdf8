package metrics

import (
	"errors"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// The names of the metrics toolgate exports: those of Metrics and of
// this package's collectors, and the gauges toolgate's processes read
// from the store (toolgate_pending_approvals, toolgate_consumer_*).
const (
	NameToolCalls            = "toolgate_tool_calls_total"
	NameTransitions          = "toolgate_transitions_total"
	NameApprovalResponse     = "toolgate_approval_response_seconds"
	NamePendingApprovals     = "toolgate_pending_approvals"
	NameApprovalTimeouts     = "toolgate_approval_timeouts_total"
	NameExecution            = "toolgate_execution_seconds"
	NameExecutionAttempts    = "toolgate_execution_attempts_total"
	NameCost                 = "toolgate_cost_total"
	NameNotifications        = "toolgate_notifications_total"
	NameTransitionConflicts  = "toolgate_transition_conflicts_total"
	NameRequeues             = "toolgate_requeues_total"
	NameRunnableCalls        = "toolgate_runnable_calls"
	NameConsumerPending      = "toolgate_consumer_pending_messages"
	NameConsumerAckPending   = "toolgate_consumer_ack_pending_messages"
	NameConsumerRedeliveries = "toolgate_consumer_redelivered_messages"
	NameConsumerStalled      = "toolgate_consumer_stalled_seconds"
	NameAnalyticsLag         = "toolgate_analytics_lag_events"
)

// NotificationChannels are the channel types a notifier reports to
// Notification (policy.ChannelType's values).
var NotificationChannels = []string{string(policy.ChannelWebhook), string(policy.ChannelSlack), string(policy.ChannelNtfy), string(policy.ChannelEmail)}

// NotificationNoChannel is the channel label of an event whose call names
// no channel: its notification is always NotificationSkipped.
const NotificationNoChannel = "none"

// The results a notifier reports to Notification.
const (
	NotificationSent    = "sent"    // the channel accepted it
	NotificationFailed  = "failed"  // the channel refused it or could not be reached
	NotificationSkipped = "skipped" // nothing to send (no channel for the team, muted)
)

// The reason Requeues counts: a call's executor stopped heartbeating.
const RequeueLeaseExpired = "lease_expired"

// DecisionApproved and DecisionRejected are the values of the decision label.
const (
	DecisionApproved = "approved"
	DecisionRejected = "rejected"
)

// stateNone is the from label of a transition that created its entry.
const stateNone = "none"

// Metrics are the counters and histograms of one process. Those fed by
// TOOL_EVENTS are updated by Observe, which the process's exporter calls
// for every event; the notifier and the machine's callers update the others. Their
// tool and team labels are only names the policy in force names, any
// other counting as OtherLabel (BoundLabels).
type Metrics struct {
	ToolCalls           *prometheus.CounterVec   // tool, outcome (the terminal state)
	Transitions         *prometheus.CounterVec   // from, to
	ApprovalResponse    *prometheus.HistogramVec // tool, decision: request to human decision
	ApprovalTimeouts    *prometheus.CounterVec   // tool
	Execution           *prometheus.HistogramVec // tool, outcome: claim to result
	ExecutionAttempts   *prometheus.CounterVec   // tool
	Cost                *prometheus.CounterVec   // team, tool
	Notifications       *prometheus.CounterVec   // channel, result
	TransitionConflicts *prometheus.CounterVec   // event
	Requeues            *prometheus.CounterVec   // reason

	// The shadow policy's comparisons (shadow.go).
	ShadowCompared    prometheus.Counter
	ShadowDifferences *prometheus.CounterVec // change

	// labels bounds the tool and team label values to the policy's names.
	labels labels
}

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameToolCalls,
			Help: "Tool calls that ended, by tool and terminal state (outcome). Every replica counts every event: aggregate with max, not sum.",
		}, []string{"tool", "outcome"}),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameTransitions,
			Help: `Transitions of tool calls, by state left (from, "none" when the call was created) and entered (to).`,
		}, []string{"from", "to"}),
		ApprovalResponse: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameApprovalResponse,
			Help:    "Time from a call's request to a human's decision, by tool and decision (approved, rejected).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400},
		}, []string{"tool", "decision"}),
		ApprovalTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameApprovalTimeouts,
			Help: "Calls nobody decided before their approval deadline (rejected by the timeout, or flagged overdue), by tool.",
		}, []string{"tool"}),
		Execution: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameExecution,
			Help:    "Time from an executor's claim of a call to its result, by tool and terminal state (outcome).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"tool", "outcome"}),
		ExecutionAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameExecutionAttempts,
			Help: "Claims of calls by executors (first attempts and reclaims after a lost lease), by tool.",
		}, []string{"tool"}),
		Cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameCost,
			Help: "Cost executors reported for finished calls, by team and tool.",
		}, []string{"team", "tool"}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameNotifications,
			Help: "Notifications this process sent, by channel and result (sent, failed, skipped). Per process: sum across instances.",
		}, []string{"channel", "result"}),
		TransitionConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameTransitionConflicts,
			Help: "Commands of this process refused because another actor moved the call first, by event. Per process: sum across instances.",
		}, []string{"event"}),
		Requeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRequeues,
			Help: "Calls this process handed an executor again, by reason: lease_expired (the executor that ran it stopped heartbeating). Per process: sum across instances.",
		}, []string{"reason"}),
	}
	m.ShadowCompared, m.ShadowDifferences = newShadow()
	for _, c := range []prometheus.Collector{m.ToolCalls, m.Transitions, m.ApprovalResponse, m.ApprovalTimeouts,
		m.Execution, m.ExecutionAttempts, m.Cost, m.Notifications, m.TransitionConflicts, m.Requeues,
		m.ShadowCompared, m.ShadowDifferences} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.initialize()
	return m, nil
}

// initialize starts at 0 every series whose labels are known before the
// first event: a panel then shows 0, not "No data", and a rate sees the
// first increment. Those are every transition of the table, event,
// notification channel and result, and requeue reason; and, for the tool
// and team labels, OtherLabel and no team, and the names BoundLabels'
// vocabulary lists (initializeNames). The histograms start for OtherLabel
// only: one per named tool would be a dozen series each.
func (m *Metrics) initialize() {
	m.initializeNames(nil, nil)
	for _, d := range []string{DecisionApproved, DecisionRejected} {
		m.ApprovalResponse.WithLabelValues(OtherLabel, d)
	}
	for _, s := range []machine.State{machine.StateCompletedSuccess, machine.StateCompletedFailure} {
		m.Execution.WithLabelValues(OtherLabel, string(s))
	}
	for _, e := range transitionEdges() {
		m.Transitions.WithLabelValues(e[0], e[1])
	}
	for _, ev := range machine.Events() {
		m.TransitionConflicts.WithLabelValues(string(ev))
	}
	for _, ch := range NotificationChannels {
		for _, r := range []string{NotificationSent, NotificationFailed, NotificationSkipped} {
			m.Notifications.WithLabelValues(ch, r)
		}
	}
	m.Notifications.WithLabelValues(NotificationNoChannel, NotificationSkipped)
	m.Requeues.WithLabelValues(RequeueLeaseExpired)
	for _, c := range ShadowChanges() {
		m.ShadowDifferences.WithLabelValues(c)
	}
}

// initializeNames starts at 0 the counters of the tools and teams given,
// and of OtherLabel and no team.
func (m *Metrics) initializeNames(tools, teams []string) {
	tools = append([]string{OtherLabel}, tools...)
	teams = append([]string{"", OtherLabel}, teams...)
	for _, tool := range tools {
		for _, s := range machine.States {
			if s.Terminal() {
				m.ToolCalls.WithLabelValues(tool, string(s))
			}
		}
		m.ApprovalTimeouts.WithLabelValues(tool)
		m.ExecutionAttempts.WithLabelValues(tool)
		for _, team := range teams {
			m.Cost.WithLabelValues(team, tool)
		}
	}
}

// diagramEdge is a transition in machine.Diagram: from --> to: event (…).
var diagramEdge = regexp.MustCompile(`(?m)^\s*(\S+) --> (\S+): (\S+) \(`)

// transitionEdges are the from and to labels of every transition an event
// is published for, from the one transition table (as the diagram shows
// it).
func transitionEdges() [][2]string {
	var edges [][2]string
	seen := map[[2]string]bool{}
	for _, m := range diagramEdge.FindAllStringSubmatch(machine.Diagram(), -1) {
		if machine.Event(m[3]).Silent() {
			continue // no event: nothing observes it
		}
		e := [2]string{m[1], m[2]}
		if e[0] == "[*]" {
			e[0] = stateNone
		}
		if !seen[e] {
			seen[e] = true
			edges = append(edges, e)
		}
	}
	return edges
}

var (
	registeredMu sync.Mutex
	registered   = map[prometheus.Registerer]*Metrics{}
)

// For returns the Metrics registered with reg, creating and registering
// them the first time. Every role of a process shares one registry, so the
// notifier, the analytics role and the HTTP API each call For with it and
// get the same counters, without anything passing them around.
func For(reg prometheus.Registerer) (*Metrics, error) {
	registeredMu.Lock()
	defer registeredMu.Unlock()
	if m, ok := registered[reg]; ok {
		return m, nil
	}
	m, err := New(reg)
	if err != nil {
		return nil, err
	}
	registered[reg] = m
	return m, nil
}

// Observe counts one event. Each event must be observed once per process:
// toolgate's exporter reads every event of TOOL_EVENTS exactly once.
func (m *Metrics) Observe(ev *wire.Event) {
	from := string(ev.From)
	if from == "" {
		from = stateNone
	}
	m.Transitions.WithLabelValues(from, string(ev.To)).Inc()
	e := ev.Entry
	if e == nil {
		return
	}
	tool := m.labels.tool(e.ToolName)
	if ev.To.Terminal() {
		m.ToolCalls.WithLabelValues(tool, string(ev.To)).Inc()
	}
	// By subject, not event: events the table gives one public name are
	// one thing to count (a start and a reclaim are both attempts). A
	// timeout and an overdue flag, on subjects of their own, are both
	// calls nobody answered in time.
	subject, _ := wire.EventSubject(ev.Event)
	switch subject {
	case wire.SubjectApprovalGranted, wire.SubjectApprovalRejected:
		decision := DecisionApproved
		if subject == wire.SubjectApprovalRejected {
			decision = DecisionRejected
		}
		m.ApprovalResponse.WithLabelValues(tool, decision).Observe(seconds(e.DecisionTime - e.RequestedAt))
	case wire.SubjectApprovalTimeout, wire.SubjectApprovalOverdue:
		m.ApprovalTimeouts.WithLabelValues(tool).Inc()
	case wire.SubjectExecutionStarted:
		m.ExecutionAttempts.WithLabelValues(tool).Inc()
	case wire.SubjectExecutionSucceeded, wire.SubjectExecutionFailed:
		if e.LastAttemptTime > 0 {
			m.Execution.WithLabelValues(tool, string(ev.To)).Observe(seconds(ev.At - e.LastAttemptTime))
		}
		m.Cost.WithLabelValues(m.labels.team(e.Team), tool).Add(e.Cost)
	}
}

func seconds(ms int64) float64 { return float64(max(ms, 0)) / 1000 }

// Notification counts one notification a notifier sent (or tried to) on a
// channel ("slack", "webhook", "ntfy", …) with one of NotificationSent,
// NotificationFailed, NotificationSkipped.
func (m *Metrics) Notification(channel, result string) {
	m.Notifications.WithLabelValues(channel, result).Inc()
}

// TransitionConflict counts one command refused because the entry had
// already moved on: an approval that lost to a timeout, a second executor's
// claim.
func (m *Metrics) TransitionConflict(ev machine.Event) {
	m.TransitionConflicts.WithLabelValues(string(ev)).Inc()
}

// ObserveError counts err as a transition conflict if it is one (a
// *machine.TransitionError, however wrapped) and reports whether it was.
// Callers of the machine's commands pass every error they get:
//
//	e, err := mach.Decide(ctx, id, d)
//	mx.ObserveError(err)
func (m *Metrics) ObserveError(err error) bool {
	var te *machine.TransitionError
	if !errors.As(err, &te) {
		return false
	}
	m.TransitionConflict(te.Event)
	return true
}

// NewRunnableCalls returns the gauge of the calls ready for an executor
// and not yet claimed, read from ready (the process's work queue) when
// scraped: a number that grows means no executor takes the calls, or too
// few.
func NewRunnableCalls(ready func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: NameRunnableCalls,
		Help: "Calls ready for an executor and not yet claimed, as this process's work queue holds them. Every process serving the request API holds them all: take max across instances.",
	}, func() float64 { return float64(ready()) })
}

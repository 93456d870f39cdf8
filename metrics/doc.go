// Package metrics is toolgate's Prometheus side: the toolgate_* collectors
// every process exports, their names and the vocabularies of their labels.
// It is what a team registers in its own process: Metrics (New, or For a
// registry every role of the process shares), counted by Observe and the
// methods its callers call, and the small collectors that read a plain
// function at scrape time (NewRunnableCalls, NewAnalyticsLag). It reads
// nothing from NATS: toolgate's own processes feed Metrics from
// TOOL_EVENTS, and export the gauges read from the store, through an
// exporter of their own.
// The approval statistics, time series and policy recommendations kept in
// KV are the analytics'.
//
// # Counting across replicas
//
// The toolgate_* metrics come in three families, and each is queried
// differently when several toolgate processes export them:
//
//   - Fed by TOOL_EVENTS (toolgate_tool_calls_total, _transitions_total,
//     _approval_response_seconds, _approval_timeouts_total,
//     _execution_seconds, _execution_attempts_total, _cost_total). Every
//     process with the analytics role reads every event through its own
//     reader of the stream, so every replica exports the whole fleet's
//     counts (since it started). Scraping any one replica is enough, and losing
//     one loses nothing. Never sum them across instances: take
//     max by (labels) (rate(...)), as the Grafana dashboard does.
//   - Read from the store (toolgate_pending_approvals,
//     toolgate_consumer_pending_messages, _ack_pending_messages,
//     toolgate_analytics_lag_events, and toolgate_runnable_calls, from
//     the processes with the intake role):
//     every replica reports the same fleet-wide value. Use max by
//     (labels).
//   - Counted by the process that did the work
//     (toolgate_notifications_total, toolgate_transition_conflicts_total,
//     toolgate_requeues_total): each process counts only its own. Sum
//     them. toolgate_consumer_stalled_seconds, also the process's own (how
//     long a durable consumer it runs has got nothing while messages
//     wait), is read with max by (consumer).
//
// Why not one shared consumer, each process counting a share, so that sum
// works? Its shares move whenever a replica restarts, a replica that dies
// takes its unscraped increments with it, and every query would have to
// know which processes run which roles. A consumer per process costs one
// extra delivery per event per replica, which is small beside the KV
// writes behind each event.
//
// # Label values
//
// A call's tool and team are the agent's to name, and Prometheus keeps
// every label value it is shown as a series of its own, for good. So the
// tool and team labels take only names the policy in force names (a tool
// any field or rule of any scope names, Claude Code's built-in tools, an
// MCP server named as a whole for each of its tools; a team with a scope),
// and count any other value as "other" (OtherLabel): agents sending random
// names add one series, not one each. `toolgate serve` binds the metrics
// to the policy it follows (Metrics.BoundLabels); unbound, every tool and
// team is "other". A policy change applies from the next event (and, for
// toolgate_pending_approvals, the next scrape); a name the policy drops
// keeps the series it had, which stops growing.
//
// # Series that start at 0
//
// A series Prometheus has not seen shows as "No data", and the increment
// that creates it is lost to rate(). So every series whose labels are
// known before the first event is exported at 0 from the start: every
// transition of the table, event (conflicts), notification channel and
// result, requeue reason; the counters of the tools and teams the policy
// in force names when the metrics are bound to it (Metrics.BoundLabels),
// of "other" and of no team; the histograms of "other" only (one per
// named tool would be a dozen series each); toolgate_pending_approvals
// of no team and of the teams the policy names. A name the policy takes up
// later starts with its first event.
package metrics

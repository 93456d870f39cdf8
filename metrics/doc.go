// Package metrics is toolgate's Prometheus side: the toolgate_* collectors
// every process exports, and the Exporter that feeds them from TOOL_EVENTS.
// The approval statistics, time series and policy recommendations kept in
// KV are package analytics'.
//
// # Counting across replicas
//
// The toolgate_* metrics come in three families, and each is queried
// differently when several toolgate processes export them:
//
//   - Fed by TOOL_EVENTS (toolgate_tool_calls_total, _transitions_total,
//     _approval_response_seconds, _approval_timeouts_total,
//     _execution_seconds, _execution_attempts_total, _cost_total). Every
//     process that runs an Exporter reads every event through its own
//     ordered consumer, so every replica exports the whole fleet's counts
//     (since it started). Scraping any one replica is enough, and losing
//     one loses nothing. Never sum them across instances: take
//     max by (labels) (rate(...)), as the Grafana dashboard does.
//   - Read from the store (toolgate_pending_approvals,
//     toolgate_consumer_pending_messages, _ack_pending_messages): every
//     replica reports the same fleet-wide value. Use max by (labels).
//   - Counted by the process that did the work
//     (toolgate_notifications_total, toolgate_transition_conflicts_total):
//     each process counts only its own. Sum them.
//
// Why not one shared consumer, each process counting a share, so that sum
// works? Its shares move whenever a replica restarts, a replica that dies
// takes its unscraped increments with it, and every query would have to
// know which processes run which roles. A consumer per process costs one
// extra delivery per event per replica, which is small beside the KV
// writes behind each event.
package metrics

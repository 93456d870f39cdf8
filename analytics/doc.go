// Package analytics is toolgate's approval statistics: what humans and
// policy did with the agents' tool calls, kept so that someone can tune the
// policy. A subscriber of TOOL_EVENTS (Analytics.Run) folds every event
// into aggregates in the tool_analytics KV bucket (Bucket): per tool, per
// team, per approver and per hour, with the time to decide kept as a
// bounded histogram (Durations). Analytics.Report reads them back as a
// Report: totals, tables, a time series by hour or minute, and
// Recommendations (an allow rule for a tool humans always approve, a look
// at one they mostly reject, a longer timeout or other approvers for one
// that times out). GET /v1/analytics (Analytics.ServeHTTP), the inbox's
// Analytics tab and `toolgate stats` show it; `toolgate analytics rebuild`
// (Analytics.Rebuild) re-derives it from the stream.
//
// The Prometheus metrics are package metrics': what each process exports
// for scraping and alerting. These are durable aggregates instead, each
// event counted once for the whole fleet, kept across restarts.
//
// # One consumer for every replica
//
// Analytics is a durable consumer of TOOL_EVENTS, shared by every process
// that runs the analytics role, that folds events into the aggregates. Any
// replica serves them, and a restarted one goes on where the consumer
// stopped. See Analytics for how it avoids counting an event twice
// (consumer.Applied is the set of sequences each aggregate has taken in).
package analytics

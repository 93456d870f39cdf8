// Package analytics is toolgate's approval statistics: what humans and
// policy did with the agents' tool calls, kept so that someone can tune the
// policy. A subscriber of TOOL_EVENTS (Analytics.Run) folds every event
// into aggregates in the tool_analytics KV bucket (Bucket): per tool, per
// team, per approver and per hour, with the time to decide kept as a
// bounded histogram (Durations). Analytics.Report reads them back as a
// wire.AnalyticsReport: totals, tables, a time series by hour or minute, and
// Recommendations (an allow rule for a tool humans always approve, a look
// at one they mostly reject, a longer timeout or other approvers for one
// that times out). GET /v1/analytics (through gate), the inbox's
// Analytics tab and `toolgate stats` show it; `toolgate analytics rebuild`
// (Analytics.Rebuild) re-derives it from the stream.
//
// The Prometheus metrics are package metrics': what each process exports
// for scraping and alerting. These are durable aggregates instead, each
// event counted once for the whole fleet, kept across restarts.
//
// # Every replica reads every event
//
// Every process that runs the analytics role reads every event of
// TOOL_EVENTS in order, from the process's events feed (views.EventsFeed)
// or an ordered consumer of its own, and folds each batch into the
// aggregates it touches by compare-and-set; the batch's last sequence is
// then recorded in the bucket as a checkpoint, where a process starts.
// Any replica serves the aggregates, and a restarted one goes on from the
// checkpoint. See Analytics for how an event is never counted twice
// (consumer.Applied is the set of sequences each aggregate has taken in).
// The bucket is a stores.AnalyticsStore: each aggregate, the generation in
// force and its checkpoint change through the one compare-and-set loop,
// jsio.Update, which asks again of a stream leader lost and reports a full
// store, as for every store of toolgate's; the package imports no nats.go.
package analytics

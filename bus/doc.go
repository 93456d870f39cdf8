// Package bus is toolgate's server side on NATS, below the application
// layer: connecting (Connect), provisioning the buckets and streams
// (Provision), and a store over each of them: the KV-backed
// machine.Store of tool_calls (KVStore), the policy (PolicyStore), the
// grants (GrantStore), the budget ledger (BudgetLedger), the rate rules'
// counters (RateCounters), the one-time decision tokens, the identities
// issued, the receipt keys, the finished calls retired to TOOL_ARCHIVE
// (Archive) and the analytics' aggregates (AnalyticsStore). The Relay
// turns every revision of tool_calls into its events on TOOL_EVENTS.
//
// Every read-modify-write of these stores goes through one
// compare-and-set loop (update), and every JetStream error a caller may
// act on leaves bus as one of machine's (machine.ErrConflict,
// machine.ErrNotFound). The packages above bus hold a Conn, the process's
// connection, which internal/server makes: they build their stores and
// feeds over it, and publish, listen and request through it, naming
// none of nats.go's types.
//
// A process follows what it keeps in memory through one watch of
// tool_calls (CallsFeed), whose views are the call index (CallIndex), the
// executors' work queue (WorkQueue) and the ids of the archived calls
// (ArchivedIDs), and through one reader of TOOL_EVENTS (EventsFeed) for
// those who follow the events without a durable consumer.
//
// Package gate writes through these stores; nothing else writes
// tool_calls. The durable consumer runner the other roles are built on is
// package consumer, the request API package natsapi. The embedded server
// is in bus/embedded, so that what links bus need not link a NATS server.
package bus

// Package stores is toolgate's own stores on JetStream, beside the calls
// (bus.KVStore): the policy and its shadow (PolicyStore, ShadowLog), the
// grants (GrantStore, which a process that submits follows with one
// watch), the budget ledger (BudgetLedger), the rate rules' counters
// (RateCounters), the flows' marks (FlowMarks), the one-time decision
// tokens (DecisionTokenStore), the identities issued (IdentityStore), the
// receipt keys (ReceiptKeyStore), the analytics' aggregates
// (AnalyticsStore), the finished calls retired to TOOL_ARCHIVE (Archive)
// and the clock a process tells deadlines and leases by (ServerClock: its
// machine's, corrected by the offset to the NATS server's).
//
// Every read-modify-write of them goes through jsio.Update, and every
// JetStream error a caller may act on leaves them as one of machine's
// (machine.ErrConflict, machine.ErrNotFound).
package stores

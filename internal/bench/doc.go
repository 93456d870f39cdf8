// Package bench measures toolgate, as `toolgate bench` reports it:
// lifecycles per second and their latencies, on the approval path (an
// agent submits a call, an approver approves it, an executor runs a
// handler that does nothing, the agent gets the result) and the auto-run
// path (the same for a call the policy runs without asking), against the
// raw KV compare-and-set rate of the same server measured in the same run.
// The ratio of the two is the figure comparable across machines
// (docs/performance.md). Each party holds its role's credential.
package bench

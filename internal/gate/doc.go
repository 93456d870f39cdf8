// Package gate is toolgate's application layer: every use case, once. Its
// Service is the only code that builds a machine.Machine or writes the
// tool_calls bucket; the transports (the HTTP API, the NATS request
// service, the Claude Code hooks, the CLI through the NATS service) only
// decode a request, call the Service, and encode what it returns.
//
// Agents and executors never write toolgate's buckets: they submit,
// claim, heartbeat and report through the request endpoints, so a NATS
// permission model can keep them out of the buckets altogether.
//
// The Service exports only use cases, each (ctx, Actor, request) and
// (reply, error), so that a transport is a table over them; the few
// exceptions (Read, SubmitOnce, Authenticate) say why in their doc. They
// are in one file per resource, each over the Service's stores: calls.go
// (submit, read, history, list, decide, cancel), batch.go (deciding every
// call a filter matches), work.go (taking work, claiming, heartbeats,
// retries and the run's outcome), grants.go, policy.go with dryrun.go and
// explain.go, credentials.go, receipts.go, budgets.go (budgets and rate
// limits), flows.go (the flows' marks of completed calls, and their replay
// in a dry run), analytics.go and retention.go.
//
// What no authenticated actor asks for lives on types the Service hands
// out, over the same stores: Timer (timer.go), the commands a call's
// deadlines give (expire, remind, escalate, abandon a lease, and retire a
// finished call, in retention.go), which internal/worker's Timer gives;
// Links (decisiontoken.go), the one-time decision links, issued by the
// notifier and redeemed by their token; Slack (slack.go), the decisions
// Slack's signed clicks make; and Runtime (runtime.go), what a process
// runs beside the use cases: the views of tool_calls on its feed, the
// followers, the receipt key it registers, the masking of its events.
//
// A Service is built over a bus.Conn and the buckets bus provisioned
// (Config): bus builds its stores, announces and hears over the
// connection, and turns JetStream's errors into machine's, so the
// application layer names none of nats.go's types.
package gate

// Package gate is toolgate's application layer: every use case, once. Its
// Service is the only code that builds a machine.Machine or writes the
// tool_calls bucket; the transports (the HTTP API, the NATS request
// service, the Claude Code hooks, the CLI through the NATS service) only
// decode a request, call the Service, and encode what it returns.
//
// Agents and executors never write toolgate's buckets: they submit,
// claim, heartbeat and report through the request endpoints, so a NATS
// permission model can keep them out of the buckets altogether.
package gate

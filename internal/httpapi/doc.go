// Package httpapi is toolgate's HTTP side, a transport over the application
// layer (package gate): a versioned JSON API, server-sent events of every
// transition (resumable with Last-Event-ID, the TOOL_EVENTS sequence),
// bearer-token auth with roles, Claude Code's HTTP hooks, one-time
// decision links and Slack's interactivity endpoint, health and metrics
// endpoints, the OpenAPI document, and the web inbox.
//
// The API is one table of routes (server.go). A route that is a use case
// of gate is answer(use case) (answer.go): its wire request is decoded
// from the body or the query, the path's values set into it (the path
// names the call), and checked as the NATS request API checks it
// (wire.CheckRequest); the use case is called as the token's identity and
// its reply encoded, or its error mapped once. Every bound is gate's or
// wire's, so both transports refuse the same requests the same way. The
// event streams, the hooks, Slack's signed posts, the decision links and
// the process's own endpoints have handlers of their own.
package httpapi

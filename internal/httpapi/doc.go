// Package httpapi is toolgate's HTTP side, a transport over the application
// layer (package gate): a versioned JSON API, server-sent events of every
// transition (resumable with Last-Event-ID, the TOOL_EVENTS sequence),
// bearer-token auth with roles, Claude Code's HTTP hooks, one-time
// decision links and Slack's interactivity endpoint, health and metrics
// endpoints, the OpenAPI document, and the web inbox. Each handler
// decodes a request, calls one gate use case as the token's identity, and
// encodes what it returns.
package httpapi

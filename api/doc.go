// Package api is toolgate's HTTP side: a versioned JSON API over the
// Machine, server-sent events of every transition (resumable with
// Last-Event-ID, the TOOL_EVENTS sequence), bearer-token auth with roles,
// health and metrics endpoints, the OpenAPI document, and the web inbox.
package api

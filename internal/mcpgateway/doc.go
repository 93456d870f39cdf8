// Package mcpgateway is an MCP gateway: an MCP server (stdio or
// streamable HTTP) in front of one or more MCP servers (commands spoken
// to over stdio, or streamable-HTTP URLs) that forwards what a client asks
// of them -- tools, resources, prompts, completions, log levels; and back,
// list changes, log messages, progress, sampling and elicitation -- and
// puts every tools/call through toolgate first.
//
// A call is submitted as tool mcp__<server>__<tool> in the conversation of
// the client's MCP session, under the identity of the credential the
// gateway holds. Only when toolgate lets it run does the server hear of
// it, with the arguments toolgate recorded (an approver may have edited
// them); its outcome is recorded on the entry. A refusal reaches the
// client as a tool result with isError set, saying who refused and why.
// Tools the policy denies whatever their arguments are left out of
// tools/list. The gateway writes nothing of toolgate's: it uses the
// request API, as an agent does.
//
// A session ends when its client does: on stdio when its stream closes;
// over HTTP when the client ends it (DELETE), or after Options.IdleTimeout
// without a request or an open stream. Its calls still waiting are then
// withdrawn, and its upstream servers stopped. A call whose client stops
// waiting (it cancels the request, or the request's connection drops) is
// withdrawn at once. A client that declares the MCP tasks extension
// (io.modelcontextprotocol/tasks) is answered at once, for a call that
// waits on a human, with a task, and so is a client of the 2025-11-25
// revision that asks for one in the call (its own tasks: see
// callAsCoreTask): the task is the toolgate call, which the client polls
// with tasks/get and withdraws with tasks/cancel, and which any gateway
// with the same credential answers for (see callAsTask). A call toolgate cannot be asked about (its
// connection is down: see client.WithConnectWait) is refused, saying so,
// and nothing is recorded of it.
package mcpgateway

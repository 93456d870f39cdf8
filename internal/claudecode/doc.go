// Package claudecode plugs Claude Code into toolgate. Claude Code hands a
// permission decision to an outside service in several documented ways:
// hooks (PreToolUse or PermissionRequest to decide, PostToolUse and
// PostToolUseFailure to record the result, PermissionDenied to record a
// denial by its own classifier), run as a command, called over HTTP or
// as an MCP tool (an mcp_tool handler); a permission-prompt MCP tool; and
// a channel that relays the session's permission prompts. This package
// reads their JSON, submits the call, waits for toolgate's verdict within
// the time Claude Code gives it (withdrawing the call when that runs out
// or Claude Code stops waiting; deferring it, in a headless session) and
// answers in the shape each one expects, telling the model what decided.
package claudecode

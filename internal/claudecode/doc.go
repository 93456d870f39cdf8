// Package claudecode plugs Claude Code into toolgate. Claude Code hands a
// permission decision to an outside service in two documented ways: hooks
// (PreToolUse or PermissionRequest to decide, PostToolUse and
// PostToolUseFailure to record the result), run as a command or called
// over HTTP, and a permission-prompt MCP tool. This package reads their
// JSON, submits the call, waits for toolgate's verdict within the time
// Claude Code gives the hook (withdrawing the call when that runs out or
// Claude Code stops waiting) and answers in the shape each one expects.
package claudecode

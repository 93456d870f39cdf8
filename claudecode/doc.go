// Package claudecode plugs Claude Code into toolgate. Claude Code hands a
// permission decision to an outside service in two documented ways: hooks
// (PreToolUse, PermissionRequest, and PostToolUse to record the result),
// run as a command or called over HTTP, and a permission-prompt MCP tool.
// This package reads their JSON, submits the call, waits for toolgate's
// verdict and answers in the shape each one expects.
package claudecode

package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ApproveToolName is the permission-prompt tool's name: with the server
// registered as "toolgate", Claude Code calls it as mcp__toolgate__approve
// (claude --permission-prompt-tool mcp__toolgate__approve).
const ApproveToolName = "approve"

// ApproveInput is what Claude Code passes the permission-prompt tool.
// Fields it may add later are accepted and ignored (approveSchema).
type ApproveInput struct {
	ToolName  string         `json:"tool_name"`
	Input     map[string]any `json:"input"`
	ToolUseID string         `json:"tool_use_id,omitempty"`
}

// approveSchema is the approve tool's input schema. It is written out
// rather than inferred from ApproveInput, whose inferred schema forbids
// properties it does not name: a field a later Claude Code sends would
// make every call fail. tool_name and input are required, as Claude Code
// always sends them.
var approveSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "tool_name": {"type": "string", "description": "the tool Claude Code wants to run"},
    "input": {"type": "object", "description": "the tool's input"},
    "tool_use_id": {"type": "string", "description": "the tool call's id"}
  },
  "required": ["tool_name", "input"]
}`)

// NewMCPServer returns an MCP server with the approve tool, and the hook
// tool for an mcp_tool hook handler (see HookAnswer). Every call it
// is asked about belongs to conversation (one server runs per Claude Code
// session). Its result is one text block holding
// {"behavior":"allow","updatedInput":{…}} (the input echoed when nobody
// edited it) or {"behavior":"deny","message":"…"}. The tool has no "ask":
// a call toolgate cannot be asked about (it is unreachable), or that
// nobody decided within opts.Wait (then withdrawn), is denied, saying
// why. A request Claude Code cancels withdraws its call.
func NewMCPServer(g Gate, conversation, version string, opts Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "toolgate", Version: version}, nil)
	mcp.AddTool(s, &mcp.Tool{
		Name: ApproveToolName,
		Description: "Ask toolgate whether Claude Code may run a tool call: its policy decides, or a human approves from toolgate's inbox, CLI or chat. " +
			"A call nobody decides in time, or that toolgate cannot be asked about, is denied.",
		InputSchema: approveSchema,
	}, func(ctx context.Context, _ *mcp.CallToolRequest, a ApproveInput) (*mcp.CallToolResult, any, error) {
		if a.ToolName == "" {
			return nil, nil, fmt.Errorf("tool_name: required")
		}
		input, err := json.Marshal(a.Input)
		if err != nil || a.Input == nil {
			input = []byte("{}")
		}
		ctx, stop := said(ctx)
		defer stop()
		in := Input{SessionID: conversation, HookEventName: EventPermissionRequest, ToolName: a.ToolName, ToolInput: input, ToolUseID: a.ToolUseID}
		d := decide(ctx, g, in, opts, "")
		switch d.Behavior {
		case Allow:
			if len(d.UpdatedInput) == 0 {
				d.UpdatedInput = input
			}
		case Deny:
		default: // ask: the tool has no prompt to ask
			d.Reason += ": denied (the permission-prompt tool denies what toolgate does not decide)"
		}
		text, _ := json.Marshal(d.Permission())
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: HookToolName,
		Description: "Claude Code's hook for an mcp_tool hook handler: takes the hook's input (PreToolUse, PermissionRequest, PostToolUse, " +
			"PostToolUseFailure) and answers, as text, the JSON the command hook `toolgate hook claude-code` prints.",
		InputSchema: hookSchema,
	}, func(ctx context.Context, _ *mcp.CallToolRequest, raw map[string]any) (*mcp.CallToolResult, any, error) {
		ctx, stop := said(ctx)
		defer stop()
		answer := HookAnswer(ctx, g, raw, opts)
		text, _ := json.Marshal(answer)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}, nil, nil
	})
	return s
}

// HookToolName is the hook tool's name: an mcp_tool hook handler calls it
// as {"type": "mcp_tool", "server": "toolgate", "tool": "hook", "input": …}.
const HookToolName = "hook"

// hookSchema is the hook tool's input schema: the hook input's fields, as
// an mcp_tool handler's input fills them in from it ("${tool_use_id}").
// tool_input may come as an object or as its JSON in a string.
var hookSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "session_id": {"type": "string"},
    "hook_event_name": {"type": "string", "description": "PreToolUse, PermissionRequest, PostToolUse or PostToolUseFailure"},
    "tool_name": {"type": "string"},
    "tool_input": {"type": ["object", "string"], "description": "the tool's input, or its JSON"},
    "tool_use_id": {"type": "string"},
    "permission_mode": {"type": "string"},
    "tool_response": {"description": "PostToolUse: the tool's response"},
    "error": {"type": "string", "description": "PostToolUseFailure: the tool's error"},
    "reason": {"type": "string", "description": "PermissionDenied: the classifier's reason"},
    "headless": {"type": "boolean", "description": "true: the session is non-interactive: a PreToolUse call that waits for a human is deferred (the command hook's --headless)"}
  },
  "required": ["session_id", "hook_event_name", "tool_name"]
}`)

// HookAnswer answers a hook input given as the hook tool's arguments (an
// mcp_tool handler's input): what the command hook prints. An input it
// cannot read is refused in the event's shape (a deny at PreToolUse and
// PermissionRequest), and toolgate failing is answered as Failed says.
// "headless": true is the command hook's --headless.
func HookAnswer(ctx context.Context, g Gate, raw map[string]any, opts Options) any {
	if headless, ok := raw["headless"].(bool); ok {
		opts.Headless = headless
		delete(raw, "headless")
	}
	if s, ok := raw["tool_input"].(string); ok {
		var v map[string]any
		if json.Unmarshal([]byte(s), &v) == nil && v != nil {
			raw["tool_input"] = v
		}
	}
	data, _ := json.Marshal(raw)
	in, err := ParseInput(data)
	if err != nil {
		return Refuse(EventOf(data), "toolgate refused the hook's input: "+err.Error())
	}
	if _, ok := raw["tool_input"].(string); ok {
		return Refuse(in.HookEventName, `toolgate refused the hook's input: tool_input: want an object, or its JSON in a string ("${tool_input}")`)
	}
	answer, err := Handle(ctx, g, in, opts)
	if err != nil {
		return Failed(in, opts, err)
	}
	return answer
}

// errCancelled is why a request Claude Code cancelled, or whose
// connection closed, stopped.
var errCancelled = errors.New("it cancelled the request, or closed the connection")

// said is ctx, ending when it does, with a cause a person reads instead of
// Go's "context canceled"; stop releases it.
func said(ctx context.Context) (context.Context, func()) {
	out, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			cancel(cause)
			return
		}
		cancel(errCancelled)
	})
	return out, func() {
		stop()
		cancel(nil)
	}
}

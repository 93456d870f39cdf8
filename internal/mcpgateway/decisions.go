package mcpgateway

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// Two decisions reach an MCP client in their own shape: a call an
// approver answered with its result (respond), whose result the client
// gets as the tool's, and a rejection that asks the agent to stop its
// turn (reject --interrupt), an error result marked so.

// InterruptMarker starts the text of the error result of a call whose
// rejection asks the agent to stop its turn, and the result's _meta
// holds MetaInterrupt true: a client (or its model) tells it from any
// other refusal by either.
const InterruptMarker = "toolgate: INTERRUPT: "

// MetaInterrupt is the _meta key, true, of the result of a rejection
// that asks the agent to stop its turn.
const MetaInterrupt = "dev.toolgate/interrupt"

// MetaRespondedBy is the _meta key of the result of a call an approver
// answered instead of it running: who supplied the result.
const MetaRespondedBy = "dev.toolgate/respondedBy"

// interrupted reports whether err is a rejection that asks the agent to
// stop its turn.
func interrupted(err error) bool { return errors.Is(err, client.ErrInterrupted) }

// interruptError is the error result of a rejection that stops the turn.
func interruptError(text, pendingID string) *mcp.CallToolResult {
	res := toolError(InterruptMarker+text, pendingID)
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[MetaInterrupt] = true
	return res
}

// respondedResult is the tool result of a call an approver answered with
// its result: that result as the tool's, when it is a tool result
// (content), else its JSON as text and as structured content when it is
// an object; _meta names the call and who supplied it.
func respondedResult(e *machine.Entry) *mcp.CallToolResult {
	var res mcp.CallToolResult
	var obj map[string]any
	_ = json.Unmarshal(e.Result, &obj)
	if _, isResult := obj["content"]; !isResult || json.Unmarshal(e.Result, &res) != nil {
		res = mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(e.Result)}}}
		if obj != nil {
			res.StructuredContent = obj
		}
	}
	res.IsError = false
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[MetaPendingID] = e.PendingID
	res.Meta[MetaRespondedBy] = e.RespondedBy
	return &res
}

package wire

// FlowsBucket holds the marks of the policy's flows: per flow and
// conversation or caller, the latest call its after matched that
// completed. Each value expires a day and an hour after its last write.
const FlowsBucket = "tool_flows"

// ExplainedFlow is one flow of the policy in force whose then names the
// explained call's tool, and what it found.
type ExplainedFlow struct {
	// Flow names it as verdict reasons do:
	// flows[0] "mcp__mail__read_inbox" → "mcp__mail__send_email" (default).
	Flow   string `json:"flow"`
	Scope  string `json:"scope"`  // conversation or caller
	Within string `json:"within"` // as written: 1h
	Action string `json:"action"` // ask or deny
	// Held: then matches the call and no unless pattern exempts it.
	Held bool `json:"held"`
	// After is the call that makes the flow apply: the latest that its
	// after matched, completed within the window in the call's
	// conversation (or of its caller); nil when none did.
	After *FlowCall `json:"after,omitempty"`
	// Decided: the verdict is this flow's.
	Decided bool `json:"decided,omitempty"`
	// Why says what the flow found.
	Why string `json:"why"`
}

// FlowCall is a completed call a flow's mark names.
type FlowCall struct {
	ToolName    string `json:"toolName"`
	PendingID   string `json:"pendingId"`
	CompletedAt int64  `json:"completedAt"` // epoch milliseconds
}

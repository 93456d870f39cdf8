package wire

import "encoding/json"

// EndpointPolicyExplain evaluates one call through the policy in force,
// dry, and says which rules matched it and why (PolicyExplainRequest).
const EndpointPolicyExplain = "policy_explain"

// MaxExplainValue bounds, in runes, the argument's value an explanation
// shows: enough to see what a rule read, not the whole of a file's content.
const MaxExplainValue = 200

// PolicyExplainRequest is a call to explain: a tool, its arguments (a
// JSON object), and the team, conversation and permission mode it would
// come with. Nothing is submitted, counted or written.
type PolicyExplainRequest struct {
	ToolName       string          `json:"toolName"`
	Arguments      json.RawMessage `json:"toolArguments,omitempty"`
	Team           string          `json:"team,omitempty"`
	ConversationID string          `json:"conversationId,omitempty"`
	PermissionMode string          `json:"permissionMode,omitempty"`

	// CallerBotID is the agent the call would come from, which flows
	// scoped to the caller read ("" for none).
	CallerBotID string `json:"callerBotId,omitempty"`
}

// PolicyExplainReply is how the policy in force decides the call: its
// verdict (allow, ask or deny, as a dry run names them) and reason, the
// argument the tool's rules read, and every rule of the tool.
type PolicyExplainReply struct {
	// PolicyRevision is the revision of the policy explained (0: none
	// stored, the built-in defaults).
	PolicyRevision uint64 `json:"policyRevision"`
	Verdict        string `json:"verdict"`
	Reason         string `json:"reason"`
	// DelayMs is how long an allowed call would wait before it runs.
	DelayMs int64 `json:"delayMs,omitempty"`
	// Argument names the argument the tool's specifiers read ("" when
	// nothing names one); Value is its value, cut to MaxExplainValue
	// runes; Unreadable says why the call gives none to read ("" when it
	// does): then deny and ask rules with a specifier apply, and allow
	// rules with one do not.
	Argument   string `json:"argument,omitempty"`
	Value      string `json:"value,omitempty"`
	Unreadable string `json:"unreadable,omitempty"`
	// Rules are the rules in force that name the call's tool, in the
	// order they are checked.
	Rules []ExplainedRule `json:"rules"`

	// Flows are the flows in force whose then names the call's tool, in
	// the order they are checked (ExplainedFlow).
	Flows []ExplainedFlow `json:"flows,omitempty"`
}

// ExplainedRule is one rule and whether it matched the explained call.
type ExplainedRule struct {
	Scope   string `json:"scope"` // default, teams.<team>, conversations.<id>
	Kind    string `json:"kind"`  // deny, ask or allow
	Index   int    `json:"index"` // its place in its scope's list of its kind, from 0
	Pattern string `json:"pattern"`
	Matched bool   `json:"matched"`
	// Decided: the verdict is this rule's.
	Decided bool `json:"decided,omitempty"`
	// Why says why it matched or did not.
	Why string `json:"why"`
}

package wire

import (
	"encoding/json"

	"github.com/toolgate/toolgate/machine"
)

// The OpenID AuthZEN Authorization API 1.0 (openid.net/specs/
// authorization-api-1_0.html), which toolgate answers as a policy
// decision point over HTTP: a gateway that enforces access (a PEP) asks
// whether an agent (the subject) may call a tool (the action) with these
// arguments (the resource, a tool call), and toolgate says true only of a
// call it would run now (docs/authzen.md).
const (
	AuthZENEvaluationPath    = "/access/v1/evaluation"
	AuthZENEvaluationsPath   = "/access/v1/evaluations"
	AuthZENConfigurationPath = "/.well-known/authzen-configuration"

	// AuthZENToolCall is the type of the resource toolgate decides: a
	// tool call, its id the call's toolCallId.
	AuthZENToolCall = "tool_call"
	// AuthZENConversation is the conversation of a call whose resource
	// names none.
	AuthZENConversation = "authzen"
	// MaxEvaluations bounds the evaluations of one request.
	MaxEvaluations = 100
)

// The evaluation semantics of a batch (options.evaluations_semantic).
const (
	ExecuteAll          = "execute_all"
	DenyOnFirstDeny     = "deny_on_first_deny"
	PermitOnFirstPermit = "permit_on_first_permit"
)

// AuthZENSubject is the subject of the information model: for toolgate,
// an agent (any type; its id the agent's credential's name).
type AuthZENSubject struct {
	Type       string          `json:"type"`
	ID         string          `json:"id"`
	Properties json.RawMessage `json:"properties,omitempty"`
}

// AuthZENResource is the resource of the information model: for
// toolgate, a tool call (type AuthZENToolCall, its id the call's
// toolCallId, its properties AuthZENCallProperties).
type AuthZENResource struct {
	Type       string          `json:"type"`
	ID         string          `json:"id"`
	Properties json.RawMessage `json:"properties,omitempty"`
}

// AuthZENAction is the action of the information model: for toolgate,
// the tool's name.
type AuthZENAction struct {
	Name       string          `json:"name"`
	Properties json.RawMessage `json:"properties,omitempty"`
}

// AccessEvaluationRequest is an Access Evaluation request: the subject
// is the agent (its credential's name), the action the tool, the
// resource the call (type tool_call, id its toolCallId, properties
// AuthZENCallProperties). Each is required; the context is free-form.
type AccessEvaluationRequest struct {
	Subject  *AuthZENSubject  `json:"subject,omitempty"`
	Action   *AuthZENAction   `json:"action,omitempty"`
	Resource *AuthZENResource `json:"resource,omitempty"`
	Context  json.RawMessage  `json:"context,omitempty"`
}

// AuthZENCallProperties are the resource's properties toolgate reads:
// the call as an agent submits it (machine.Call).
type AuthZENCallProperties struct {
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	ConversationID string          `json:"conversationId,omitempty"`
	Team           string          `json:"team,omitempty"`
	TaskID         string          `json:"taskId,omitempty"`
	EstimatedCost  float64         `json:"estimatedCost,omitempty"`
	PermissionMode string          `json:"permissionMode,omitempty"`
}

// AccessEvaluationsRequest is an Access Evaluations request: its
// subject, action, resource and context are the defaults of each of its
// evaluations; without evaluations it is one evaluation of them.
type AccessEvaluationsRequest struct {
	AccessEvaluationRequest
	Evaluations []AccessEvaluationRequest `json:"evaluations,omitempty"`
	Options     *AccessEvaluationsOptions `json:"options,omitempty"`
}

// AccessEvaluationsOptions are a batch's options: its evaluation
// semantics (default ExecuteAll).
type AccessEvaluationsOptions struct {
	EvaluationsSemantic string `json:"evaluations_semantic,omitempty"`
}

// AccessDecision is a Decision: true only of a call toolgate lets the
// caller run now, which the call's context says.
type AccessDecision struct {
	Decision bool           `json:"decision"`
	Context  *AccessContext `json:"context,omitempty"`
}

// AccessEvaluationsReply is an Access Evaluations response: a decision
// for each evaluation, in order (fewer when a semantic stopped early);
// to a request without evaluations, the one decision of its defaults,
// as the Access Evaluation answers it.
type AccessEvaluationsReply struct {
	Decision    *bool            `json:"decision,omitempty"`
	Context     *AccessContext   `json:"context,omitempty"`
	Evaluations []AccessDecision `json:"evaluations,omitempty"`
}

// AccessContext is toolgate's decision context: why, and which call.
type AccessContext struct {
	// Reason is a code (the Access* constants); Message says it in words.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// PendingID is the call the evaluation submitted or found, and Status
	// its state; DecidedBy who decided it (rule, policy, grant or a
	// person's name).
	PendingID string        `json:"pending_id,omitempty"`
	Status    machine.State `json:"status,omitempty"`
	DecidedBy string        `json:"decided_by,omitempty"`
	// ExpiresAt is, for a call that waits for a human, its approval
	// deadline; for a call handed to the caller, the end of its lease.
	// NotBefore is when a call scheduled for later may run. Both RFC 3339.
	ExpiresAt string `json:"expires_at,omitempty"`
	NotBefore string `json:"not_before,omitempty"`
	// Binding is what an approval of the call is bound to: a later
	// evaluation is true only for exactly these arguments.
	Binding *AccessBinding `json:"binding,omitempty"`
	// Follow says where to follow the call.
	Follow *AccessFollow `json:"follow,omitempty"`
	// Error says why toolgate could not decide: the decision is false.
	Error *AccessError `json:"error,omitempty"`
}

// AccessBinding is what an approval binds to: the call's arguments (by
// digest, machine.ArgumentsDigest) and the policy revision that asked.
type AccessBinding struct {
	ArgumentsDigest string `json:"arguments_digest"`
	PolicyRevision  uint64 `json:"policy_revision"`
}

// AccessFollow is where a call can be followed: its entry over HTTP, its
// page in the inbox, and the NATS subject its every revision is
// announced on (EntrySubject).
type AccessFollow struct {
	Call    string `json:"call,omitempty"`
	Inbox   string `json:"inbox,omitempty"`
	Subject string `json:"subject"`
}

// AccessError is why an evaluation could not be decided: an HTTP status
// and a message, as the specification's examples have it.
type AccessError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// The reasons of a decision's context.
const (
	// True: the policy let the call run (a rule or its settings), a
	// grant covered it, or a person approved it.
	AccessAllowed  = "allowed"
	AccessGranted  = "granted"
	AccessApproved = "approved"
	// False.
	AccessApprovalRequired = "approval_required" // submitted: a human decides; evaluate again once decided
	AccessScheduled        = "scheduled"         // the policy runs it later (not_before)
	AccessPolicyDenied     = "policy_denied"
	AccessRejected         = "rejected"
	AccessExpired          = "approval_expired"
	AccessCancelled        = "cancelled"
	AccessEdited           = "arguments_edited" // approved with other arguments, which it runs only as edited
	AccessConsumed         = "consumed"         // handed out already: a call runs once
	AccessOtherCall        = "other_call"       // its toolCallId names a call with other arguments
	AccessUndecided        = "undecided"        // toolgate could not decide (Error)
)

// AuthZENConfiguration is the policy decision point's metadata, served
// at AuthZENConfigurationPath.
type AuthZENConfiguration struct {
	PolicyDecisionPoint       string `json:"policy_decision_point"`
	AccessEvaluationEndpoint  string `json:"access_evaluation_endpoint"`
	AccessEvaluationsEndpoint string `json:"access_evaluations_endpoint"`
}

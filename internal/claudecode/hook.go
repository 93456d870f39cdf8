package claudecode

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// The hook events handled.
const (
	EventPreToolUse         = "PreToolUse"
	EventPermissionRequest  = "PermissionRequest"
	EventPostToolUse        = "PostToolUse"
	EventPostToolUseFailure = "PostToolUseFailure"
	// EventPermissionDenied fires after Claude Code's classifier (its
	// auto mode) denied a call; its answer may ask for a retry.
	EventPermissionDenied = "PermissionDenied"
)

// Input is what Claude Code sends a hook, on stdin or as a POST body.
type Input struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path,omitempty"`
	Cwd            string          `json:"cwd,omitempty"`
	PermissionMode string          `json:"permission_mode,omitempty"`
	HookEventName  string          `json:"hook_event_name"`
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolUseID      string          `json:"tool_use_id,omitempty"`
	ToolResponse   json.RawMessage `json:"tool_response,omitempty"` // PostToolUse
	Error          string          `json:"error,omitempty"`         // PostToolUseFailure
	Reason         string          `json:"reason,omitempty"`        // PermissionDenied: the classifier's
}

// ParseInput reads a hook's input, naming the field that is missing, too
// long or bad.
func ParseInput(data []byte) (Input, error) {
	var in Input
	if err := json.Unmarshal(data, &in); err != nil {
		return in, fmt.Errorf("%w: hook input: %v", machine.ErrInvalid, err)
	}
	for _, f := range []struct{ name, value string }{
		{"session_id", in.SessionID}, {"hook_event_name", in.HookEventName}, {"tool_name", in.ToolName},
	} {
		if f.value == "" {
			return in, fmt.Errorf("%w: hook input: %s: required", machine.ErrInvalid, f.name)
		}
	}
	// They become the call's conversation and toolCallId.
	for _, f := range []struct{ name, value string }{{"session_id", in.SessionID}, {"tool_use_id", in.ToolUseID}} {
		if len(f.value) > machine.MaxID {
			return in, fmt.Errorf("%w: hook input: %s: at most %d bytes, got %d", machine.ErrInvalid, f.name, machine.MaxID, len(f.value))
		}
	}
	if len(in.ToolInput) == 0 {
		in.ToolInput = json.RawMessage("{}")
	}
	return in, nil
}

// Call is the tool call the input asks about: the session is the
// conversation, and Claude Code's permission mode is passed to the policy.
//
// Its toolCallId is Claude Code's tool_use_id. A PermissionRequest has
// none, and nothing else in it tells two identical requests apart: each is
// a call of its own, under an id drawn here. So a caller makes the Call of
// a request once and submits that: the SDK's repeated submits of it (while
// toolgate does not answer) find the entry the first one made, and no later
// request ever does, so an approval given once is never replayed to
// another request, and a request withdrawn at its wait does not answer the
// next.
func (in Input) Call(caller, team string) machine.Call {
	mode := in.PermissionMode
	if !policy.Mode(mode).Valid() {
		mode = "" // a mode toolgate does not know: the policy's own applies
	}
	id := in.ToolUseID
	if id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = "cc_" + hex.EncodeToString(b[:])
	}
	return machine.Call{
		ToolCallID: id, ToolName: in.ToolName, Arguments: in.ToolInput,
		CallerBotID: caller, ConversationID: in.SessionID, Team: team, PermissionMode: mode,
	}
}

// Behavior is a permission answer, in Claude Code's words.
type Behavior string

// The answers. Ask hands the decision back to Claude Code's own prompt;
// Defer (PreToolUse only, honoured in a non-interactive session) ends the
// session at the call, to be resumed once it is decided.
const (
	Allow Behavior = "allow"
	Deny  Behavior = "deny"
	Ask   Behavior = "ask"
	Defer Behavior = "defer"
)

// Decision is toolgate's answer to one call, before it is put in the shape
// of the hook or tool that asked.
type Decision struct {
	Behavior     Behavior
	Reason       string
	UpdatedInput json.RawMessage // the input to run: edited by an approver, or the original
	Edited       bool
	// Learn, on an approval for the session or always, is the rule it
	// gave, for Claude Code's own permission rules to learn (a
	// PermissionRequest answer's updatedPermissions); nil otherwise.
	Learn *PermissionUpdate
	// Context is for the model (a hook's additionalContext): what decided
	// (the rule, grant or person, and why), the deadline of a call that
	// waits for a human, and for a refusal how the call could be allowed;
	// a few short lines.
	Context string
	// Interrupt, on a deny, asks Claude Code to stop the turn, not only
	// this call: a human rejected it so (PermissionRequest's interrupt,
	// PreToolUse's continue false).
	Interrupt bool
}

// Decide turns what Await returned into a Decision. A refusal is a deny
// with its reason; only a call toolgate lets run is allowed; anything else
// (an error, an outcome it does not know) is denied, saying so: a gate that
// cannot tell what toolgate decided does not let the call run.
func Decide(o client.Outcome, err error) Decision {
	var rej *client.RejectedError
	switch {
	case errors.As(err, &rej):
		return Decision{Behavior: Deny, Reason: "toolgate: " + rej.Error(), Context: refusedContext(rej), Interrupt: rej.Interrupt}
	case err != nil:
		return Decision{Behavior: Deny, Reason: "toolgate could not decide: " + err.Error(), Context: unsureContext}
	case o.Kind == client.Executed && o.RespondedBy != "":
		return responded(o)
	case o.Runnable(), o.Kind == client.Executed:
		reason := "toolgate: allowed by " + o.By
		if o.Reason != "" {
			reason += " (" + o.Reason + ")"
		}
		return Decision{Behavior: Allow, Reason: reason, UpdatedInput: o.Arguments, Edited: o.Edited, Context: allowedContext(o), Learn: learned(o)}
	default:
		return Decision{Behavior: Deny, Reason: fmt.Sprintf("toolgate: unexpected outcome %q: denied", o.Kind), Context: unsureContext}
	}
}

// unsureContext is the additionalContext of a call denied because toolgate
// could not say what it decided.
const unsureContext = "toolgate could not tell what was decided about this call, so it is denied; nothing was refused on its merits. Tell the user; asking again later may get an answer."

// responded is the answer to a call an approver answered with its
// result instead of it running: Claude Code must not run the tool, so
// it is denied, and the denial's reason (which reaches the model as the
// call's result) carries the result, with the context saying who
// supplied it.
func responded(o client.Outcome) Decision {
	why := ""
	if o.Entry != nil {
		why = o.Entry.StatusReason
	}
	return Decision{Behavior: Deny,
		Reason: fmt.Sprintf("toolgate: %s was answered by %s instead of running; the tool's result is: %s", o.PendingID, o.RespondedBy, o.Result),
		Context: fmt.Sprintf("toolgate: the tool did not run: approver %s supplied its result (above) in its place%s. Use it as the tool's result; do not run the call again to get it.",
			o.RespondedBy, because(why)),
	}
}

// PreToolUseOutput is a PreToolUse hook's answer. Continue false (with
// StopReason, shown to the user) stops the turn: a deny that interrupts.
type PreToolUseOutput struct {
	Continue           *bool              `json:"continue,omitempty"`
	StopReason         string             `json:"stopReason,omitempty"`
	HookSpecificOutput PreToolUseDecision `json:"hookSpecificOutput"`
}

// PreToolUseDecision is the hookSpecificOutput of PreToolUse.
type PreToolUseDecision struct {
	HookEventName            string          `json:"hookEventName"`
	PermissionDecision       Behavior        `json:"permissionDecision"`
	PermissionDecisionReason string          `json:"permissionDecisionReason"`
	UpdatedInput             json.RawMessage `json:"updatedInput,omitempty"`
	// AdditionalContext reaches the model: Decision.Context.
	AdditionalContext string `json:"additionalContext,omitempty"`
}

// PreToolUse puts d in PreToolUse's shape; updatedInput only when an
// approver edited the input.
func (d Decision) PreToolUse() PreToolUseOutput {
	out := PreToolUseOutput{HookSpecificOutput: PreToolUseDecision{
		HookEventName: EventPreToolUse, PermissionDecision: d.Behavior, PermissionDecisionReason: d.Reason,
		AdditionalContext: d.Context,
	}}
	if d.Edited {
		out.HookSpecificOutput.UpdatedInput = d.UpdatedInput
	}
	if d.Interrupt && d.Behavior == Deny {
		stop := false
		out.Continue, out.StopReason = &stop, d.Reason
	}
	return out
}

// PermissionResult is the decision of a PermissionRequest hook, and the
// text of the permission-prompt MCP tool's result.
type PermissionResult struct {
	Behavior     Behavior        `json:"behavior"`
	UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
	// UpdatedPermissions (a PermissionRequest's allow) are rules for
	// Claude Code to add, as its own "don't ask again" adds them.
	UpdatedPermissions []PermissionUpdate `json:"updatedPermissions,omitempty"`
	Message            string             `json:"message,omitempty"`
	// Interrupt (a deny's) stops the turn, not only this call.
	Interrupt bool `json:"interrupt,omitempty"`
}

// PermissionUpdate is a change to Claude Code's permission rules, as a
// PermissionRequest hook answers it (and as its input's
// permission_suggestions offer them): here, addRules.
type PermissionUpdate struct {
	Type        string           `json:"type"` // addRules
	Rules       []PermissionRule `json:"rules"`
	Behavior    Behavior         `json:"behavior"`    // allow
	Destination string           `json:"destination"` // session, localSettings
}

// PermissionRule is a rule of Claude Code's: a tool, and what of its
// input the rule covers (none: all of it).
type PermissionRule struct {
	ToolName    string `json:"toolName"`
	RuleContent string `json:"ruleContent,omitempty"`
}

// learned is the rule a human's approval for the session (destination
// session) or always (localSettings, where Claude Code's own "don't ask
// again" writes) gave: the pattern toolgate's grant of it covers, in
// Claude Code's words. Nil for an approval once, a policy's verdict, or a
// call no pattern covers alone.
func learned(o client.Outcome) *PermissionUpdate {
	var dest string
	switch o.Scope {
	case machine.ScopeSession:
		dest = "session"
	case machine.ScopeAlways:
		dest = "localSettings"
	default:
		return nil
	}
	if o.Kind != client.Approved || o.Entry == nil {
		return nil
	}
	pattern, err := policy.GrantPattern(o.Entry.Call())
	if err != nil {
		return nil
	}
	rule := PermissionRule{ToolName: pattern}
	if tool, content, ok := strings.Cut(pattern, "("); ok && strings.HasSuffix(content, ")") {
		rule = PermissionRule{ToolName: tool, RuleContent: strings.TrimSuffix(content, ")")}
	}
	return &PermissionUpdate{Type: "addRules", Rules: []PermissionRule{rule}, Behavior: Allow, Destination: dest}
}

// PermissionRequestOutput is a PermissionRequest hook's answer.
type PermissionRequestOutput struct {
	HookSpecificOutput struct {
		HookEventName string           `json:"hookEventName"`
		Decision      PermissionResult `json:"decision"`
	} `json:"hookSpecificOutput"`
}

// Permission puts d in the shape of a permission decision: allow with the
// input to run (the original echoed when unedited), or deny with a
// message, which reaches the model: the reason, then d.Context (a
// permission decision has no additionalContext). These have no "ask": an
// undecided call is denied, saying why.
func (d Decision) Permission() PermissionResult {
	if d.Behavior == Allow {
		r := PermissionResult{Behavior: Allow, UpdatedInput: d.UpdatedInput}
		if d.Learn != nil {
			r.UpdatedPermissions = []PermissionUpdate{*d.Learn}
		}
		return r
	}
	msg := d.Reason
	if d.Context != "" {
		msg += "\n" + d.Context
	}
	return PermissionResult{Behavior: Deny, Message: msg, Interrupt: d.Interrupt}
}

// PermissionRequest puts d in PermissionRequest's shape.
func (d Decision) PermissionRequest() PermissionRequestOutput {
	var out PermissionRequestOutput
	out.HookSpecificOutput.HookEventName = EventPermissionRequest
	out.HookSpecificOutput.Decision = d.Permission()
	return out
}

// Gate is what the hooks need of toolgate. The CLI's is a *client.Client
// with Calls added (its List takes the request API's wire type); the HTTP
// role's answers through the application layer in its own process.
type Gate interface {
	Submit(ctx context.Context, call machine.Call) (*machine.Entry, error)
	Await(ctx context.Context, pendingID string, opts ...client.AwaitOption) (client.Outcome, error)
	Get(ctx context.Context, pendingID string) (*machine.Entry, error)
	Cancel(ctx context.Context, pendingID, by, reason string) (*machine.Entry, error)
	Started(ctx context.Context, pendingID, by string) (*machine.Entry, error)
	Succeed(ctx context.Context, pendingID, by string, result json.RawMessage, cost float64) (*machine.Entry, error)
	Fail(ctx context.Context, pendingID, by, errMsg string, cost float64) (*machine.Entry, error)
	// Calls lists the calls of a conversation for one tool that the
	// hook's identity may see, in any state, oldest first.
	Calls(ctx context.Context, conversationID, toolName string) ([]*machine.Entry, error)
}

// Options configure the hooks.
type Options struct {
	// Caller is the callerBotId of the calls; empty, toolgate takes the
	// name of the credential the hook connects with.
	Caller string
	Team   string
	// Timeout is how long Claude Code waits for the hook (its "timeout"
	// setting; for the MCP tool, MCP_TOOL_TIMEOUT): 0 is DefaultTimeout.
	Timeout time.Duration
	// Wait bounds how long the hook waits for toolgate's verdict, counted
	// from Asked. It must leave the hook time to answer before Claude Code
	// stops waiting (see WaitFor); 0 is the most Timeout allows. Past it the
	// call is withdrawn and the decision handed back to Claude Code's own
	// prompt, unless the call's approval deadline came first (see decide).
	Wait time.Duration
	// Asked is when Claude Code asked (the hook process started, the
	// request arrived); zero is when Handle is called.
	Asked time.Time
	// OnError is the answer when toolgate cannot decide (it cannot be
	// reached, say): Deny (the default) or Ask (Claude Code's prompt
	// decides). A refusal of the call or of the hook's credential is a
	// deny whatever it says (see Unreachable).
	OnError Behavior
	// Headless says the session is non-interactive (claude -p): nobody is
	// at Claude Code's prompt. A PreToolUse whose call waits for a human
	// then answers Defer at once, and the call stays pending in toolgate;
	// the hook of the resumed session (claude -p --resume, the same
	// tool_use_id) answers from the decision, or defers again while
	// nobody has decided (see deferUntilDecided).
	Headless bool
}

// Handle answers one hook input: the JSON to print or send back.
func Handle(ctx context.Context, g Gate, in Input, opts Options) (any, error) {
	switch in.HookEventName {
	case EventPreToolUse:
		if d, ok := overruled(ctx, g, in, opts); ok {
			return Answer(in, d), nil
		}
		if opts.Headless {
			return Answer(in, deferUntilDecided(ctx, g, in, opts)), nil
		}
		return Answer(in, decide(ctx, g, in, opts, handedBack)), nil
	case EventPermissionRequest:
		return Answer(in, decide(ctx, g, in, opts, handedBack)), nil
	case EventPostToolUse, EventPostToolUseFailure:
		return struct{}{}, record(ctx, g, in, opts)
	case EventPermissionDenied:
		return permissionDenied(ctx, g, in, opts)
	default:
		return nil, fmt.Errorf("%w: hook_event_name: %q is not one toolgate handles (PreToolUse, PermissionRequest, PostToolUse, PostToolUseFailure, PermissionDenied)", machine.ErrInvalid, in.HookEventName)
	}
}

// Answer puts d in the shape of the hook that asked. A PermissionRequest
// without a decision answers nothing, so that Claude Code shows its own
// permission dialog; a PostToolUse answers nothing at all.
func Answer(in Input, d Decision) any {
	switch {
	case in.HookEventName == EventPreToolUse:
		return d.PreToolUse()
	case in.HookEventName == EventPermissionRequest && d.Behavior != Ask:
		return d.PermissionRequest()
	default:
		return struct{}{}
	}
}

// Unreachable is the decision when toolgate cannot be asked, or cannot
// answer: opts.OnError (default Deny), saying why. When toolgate refused
// what the hook asked instead (the hook's credential may not submit calls,
// the call is not one it takes), the answer is a deny whatever OnError says:
// that is no outage, and Claude Code's prompt would let the call run
// without toolgate.
func Unreachable(opts Options, err error) Decision {
	if errors.Is(err, machine.ErrForbidden) || errors.Is(err, machine.ErrInvalid) {
		return Decision{Behavior: Deny, Reason: "toolgate refused the hook's call: " + err.Error(),
			Context: "toolgate refused the hook itself (its credential, or what it sent), not this call on its merits: tell the user the toolgate hook needs fixing; the reason says how."}
	}
	return Decision{Behavior: cmp.Or(opts.OnError, Deny), Reason: "toolgate could not decide: " + err.Error(),
		Context: "toolgate could not be asked about this call, so it is " + fallback(opts.OnError) + ": nothing was decided on its merits. Tell the user; asking again later may get an answer."}
}

// fallback says what becomes of a call toolgate did not decide, under
// OnError b.
func fallback(b Behavior) string {
	if b == Ask {
		return "handed to Claude Code's own prompt"
	}
	return "denied"
}

// Notice is a hook's answer that decides nothing and shows Claude Code's
// user a message: what toolgate answers, when something went wrong, at an
// event that blocks nothing (PostToolUse: the tool has run).
type Notice struct {
	SystemMessage string `json:"systemMessage"`
}

// Refuse is the answer to a hook toolgate will not take (it carries no
// valid credential, its input cannot be read) in the shape of event, the
// input's hook_event_name: a deny saying why for PreToolUse and
// PermissionRequest, so the call does not run, and for any other event,
// which nothing blocks, a Notice saying why.
func Refuse(event, reason string) any {
	d := Decision{Behavior: Deny, Reason: reason}
	switch event {
	case EventPreToolUse:
		return d.PreToolUse()
	case EventPermissionRequest:
		return d.PermissionRequest()
	default:
		return Notice{SystemMessage: reason}
	}
}

// Failed is the answer when toolgate could not be asked about in, or
// failed to record it: Unreachable's decision at PreToolUse and
// PermissionRequest, and at the other events a Notice saying what went
// wrong.
func Failed(in Input, opts Options, err error) any {
	switch in.HookEventName {
	case EventPreToolUse, EventPermissionRequest:
		return Answer(in, Unreachable(opts, err))
	case EventPostToolUse, EventPostToolUseFailure:
		return Notice{SystemMessage: fmt.Sprintf("toolgate could not record how %s went: %v", in.ToolName, err)}
	case EventPermissionDenied:
		return Notice{SystemMessage: fmt.Sprintf("toolgate could not record Claude Code's denial of %s (it stands): %v", in.ToolName, err)}
	default:
		return Notice{SystemMessage: "toolgate: " + err.Error()}
	}
}

// EventOf returns the hook_event_name of a hook's input, or "" when data
// is not a JSON object naming one: the shape of the answer to an input
// ParseInput refuses.
func EventOf(data []byte) string {
	var in struct {
		HookEventName string `json:"hook_event_name"`
	}
	if json.Unmarshal(data, &in) != nil {
		return ""
	}
	return in.HookEventName
}

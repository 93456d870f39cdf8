package machine

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Entry is a PendingToolCallEntry: one tool call and everything that has
// happened to it. Times are epoch milliseconds, as in the reference design.
type Entry struct {
	PendingID     string          `json:"pendingId"`
	ToolCallID    string          `json:"toolCallId"`
	ToolName      string          `json:"toolName"`
	ToolArguments json.RawMessage `json:"toolArguments"`
	// OriginalArguments are the agent's arguments when an approver edited
	// them; ToolArguments then holds the edited ones, which are what runs.
	OriginalArguments json.RawMessage `json:"originalArguments,omitempty"`
	// SecretsMasked says the arguments are shown with what looks like a
	// credential (or what the policy's redact patterns name) masked: set
	// on an entry as a person reads it (the inbox, the CLI, the events
	// and notifications), never on one stored, nor on the executor's or
	// the agent's, who get the arguments as they are.
	SecretsMasked bool `json:"secretsMasked,omitempty"`
	// ArgumentsDigest is ArgumentsDigest(ToolArguments): what an approval
	// of the call binds to, and what an executor may check before it runs
	// the arguments it was handed.
	ArgumentsDigest string `json:"argumentsDigest,omitempty"`
	// PolicyRevision is the revision of the stored policy that evaluated
	// the call when it was submitted.
	PolicyRevision uint64 `json:"policyRevision,omitempty"`
	// Risk is the risk the policy attached to the call (risk:), shown to
	// its approvers first; "" when the policy says none.
	Risk           Risk   `json:"risk,omitempty"`
	CallerBotID    string `json:"callerBotId"`
	ConversationID string `json:"conversationId"`
	RequestedAt    int64  `json:"requestedAt"`

	Status            State  `json:"status"`
	StatusReason      string `json:"statusReason,omitempty"`
	ExecutionAttempts int    `json:"executionAttempts"`
	LastAttemptTime   int64  `json:"lastAttemptTime,omitempty"`

	ScheduledExecutionTime int64 `json:"scheduledExecutionTime,omitempty"`
	ApprovalTimeoutAt      int64 `json:"approvalTimeoutAt,omitempty"`
	// ReminderAt is when the approvers of a call still pending are
	// reminded of it (0: never); Reminded, that they were.
	ReminderAt int64 `json:"reminderAt,omitempty"`
	Reminded   bool  `json:"reminded,omitempty"`
	// Overdue is set when the approval deadline passed and the policy
	// kept the call pending.
	Overdue             bool     `json:"overdue,omitempty"`
	AutoRejectOnTimeout bool     `json:"autoRejectOnTimeout,omitempty"`
	UserIDToApprove     string   `json:"userIdToApprove,omitempty"`
	Approvers           []string `json:"approvers,omitempty"` // who may decide, when set
	// Quorum, when set, is how many distinct approvals the call needs;
	// Votes are the approvals (and, under RejectMajority, rejections)
	// given so far.
	Quorum *Quorum `json:"quorum,omitempty"`
	Votes  []Vote  `json:"votes,omitempty"`
	// Escalations widen who may decide the call while nobody has (see
	// Deciders); Escalated counts the tiers reached.
	Escalations                []Escalation `json:"escalations,omitempty"`
	Escalated                  int          `json:"escalated,omitempty"`
	ApprovedOrRejectedByUserID string       `json:"approvedOrRejectedByUserId,omitempty"`
	// DeciderIdentity is who ApprovedOrRejectedByUserID is at the OpenID
	// provider that signed them in, when they decided signed in so.
	DeciderIdentity *Identity `json:"deciderIdentity,omitempty"`
	// DeciderViaGroup is the group of the call's approvers (an entry
	// group:NAME) that let ApprovedOrRejectedByUserID decide, when no
	// entry named them.
	DeciderViaGroup string `json:"deciderViaGroup,omitempty"`
	DecisionTime    int64  `json:"decisionTime,omitempty"`
	// DecidedBy is what made the call's latest decision: the policy at
	// submit, then an approval, rejection or timeout (the DecidedBy of
	// the transition that made it).
	DecidedBy Decider `json:"decidedBy,omitempty"`
	// DecisionScope is how far an approval reaches: once, session, always.
	DecisionScope Scope `json:"decisionScope,omitempty"`

	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Cost   float64         `json:"cost,omitempty"`

	Team          string  `json:"team,omitempty"`
	TaskID        string  `json:"taskId,omitempty"`
	EstimatedCost float64 `json:"estimatedCost,omitempty"`
	// Currency is the ISO 4217 code its costs are counted in (the
	// policy's currency), when one is named.
	Currency string `json:"currency,omitempty"`
	// OverCostLimit says its estimated cost is above the policy's
	// requireApprovalAboveCost: a costly call, whatever else asked.
	OverCostLimit  bool   `json:"overCostLimit,omitempty"`
	PermissionMode string `json:"permissionMode,omitempty"`
	// Description is the policy's one-line account of what the call does.
	Description string `json:"description,omitempty"`
	// MaxExecutionAttempts bounds claims of the call; 0 means the default.
	MaxExecutionAttempts int `json:"maxExecutionAttempts,omitempty"`
	// Idempotent says the policy declares the call's tool safe to run
	// twice: only then does another executor take the call over when its
	// executor's lease runs out (Reclaimable). Any other call whose
	// executor is lost ends with its outcome unknown.
	Idempotent bool `json:"idempotent,omitempty"`
	// OutcomeUnknown is set on a call that ended COMPLETED_FAILURE because
	// its executor was lost after the tool may have started: whether it
	// ran is not known, and only a person runs it again (Rerun).
	OutcomeUnknown bool `json:"outcomeUnknown,omitempty"`
	// RerunOf is the call whose outcome was unknown that a person had
	// run again as this one (Rerun).
	RerunOf string `json:"rerunOf,omitempty"`
	// CostReserved is what the policy reserved of the team's daily budget
	// (on CostDay) for this call, to settle or release when it ends.
	CostReserved float64 `json:"costReserved,omitempty"`
	CostDay      string  `json:"costDay,omitempty"`
	// Lease is held by the executor running the call (EXECUTING only).
	Lease *Lease `json:"lease,omitempty"`
	// Receipts are the signed records of the entry's transitions, oldest
	// first (receipt.go).
	Receipts []Receipt `json:"receipts,omitempty"`
	// LastTransition is the transition that wrote this revision of the
	// entry. The relay publishes it as an event.
	LastTransition *Transition `json:"lastTransition,omitempty"`
	// PriorTransition is the transition this revision made before
	// LastTransition, when one write made two: an approval (or a submit
	// the policy lets run) and the claim of the executor that was waiting
	// for the call (Claimant). The relay publishes it first.
	PriorTransition *Transition `json:"priorTransition,omitempty"`

	// OnTimeout is what the timer does with the call at its deadline
	// when it is not to reject it: cancel, or approve (decisions.go).
	// Absent: rejected when AutoRejectOnTimeout, else flagged overdue.
	OnTimeout TimeoutOutcome `json:"onTimeout,omitempty"`
	// Respondable says an approver may answer the call with the tool's
	// result instead of running it; RespondedBy names the approver who
	// did, whose result is then Result.
	Respondable bool   `json:"respondable,omitempty"`
	RespondedBy string `json:"respondedBy,omitempty"`
	// NotEditable says the policy lets no approver edit the call's
	// arguments (editable: false): it is approved as asked, or not.
	NotEditable bool `json:"notEditable,omitempty"`
	// Interrupt is set on a call whose rejection asked its agent to stop
	// its turn, not only this call.
	Interrupt bool `json:"interrupt,omitempty"`
	// Reviews are what automated reviewers said of the call that left it
	// to humans (review.go): an escalation, or an approval refused as
	// beyond what the reviewer may approve. A reviewer's approval or
	// rejection that decided the call is its decision (DecidedBy), not a
	// review.
	Reviews []Review `json:"reviews,omitempty"`
}

// Transitions returns the transitions that wrote this revision, in the
// order they were made: none, LastTransition, or PriorTransition and then
// LastTransition.
func (e *Entry) Transitions() []*Transition {
	switch {
	case e.LastTransition == nil:
		return nil
	case e.PriorTransition == nil:
		return []*Transition{e.LastTransition}
	}
	return []*Transition{e.PriorTransition, e.LastTransition}
}

// Transition records one move of an entry: the event, where it came from,
// who made it and why.
type Transition struct {
	Event  Event  `json:"event"`
	From   State  `json:"from,omitempty"`
	To     State  `json:"to"`
	Actor  string `json:"actor,omitempty"`
	Reason string `json:"reason,omitempty"`
	At     int64  `json:"at"`
	// DecidedBy is what decided, on a transition that decides the call
	// (the policy's verdict at submit, an approval or rejection, a
	// timeout): Actor and Reason name who and which rule.
	DecidedBy Decider `json:"decidedBy,omitempty"`
	// Identity is who Actor is at the OpenID provider that signed them
	// in, on a decision or vote made signed in so.
	Identity *Identity `json:"identity,omitempty"`
	// ViaGroup is the group of the call's approvers (an entry
	// group:NAME) that let Actor decide or vote, when no entry named
	// them.
	ViaGroup string `json:"viaGroup,omitempty"`
	// Edit is set on an approval that edited the call's arguments.
	Edit *Edit `json:"edit,omitempty"`
	// Interrupt is set on a rejection that asks the agent to stop its
	// turn.
	Interrupt bool `json:"interrupt,omitempty"`
	// Write is a random id of the write that made this revision. Two
	// commands alike (two timers expiring a call in the same millisecond)
	// still write different values, so a store that resends a write whose
	// answer was lost, and finds the key moved on, tells its own write
	// from the other's: exactly one of them is told it made the move.
	Write string `json:"write,omitempty"`
}

// Decider is what decided a call: the kind of Transition.DecidedBy.
type Decider string

// What may decide a call.
const (
	DecidedByRule       Decider = "rule"       // an allow, ask or deny rule of the policy
	DecidedByGrant      Decider = "grant"      // a grant an approver gave earlier
	DecidedByPolicy     Decider = "policy"     // the policy's other settings: its tool lists, permission mode, costs, rate limits, defaults
	DecidedByHuman      Decider = "human"      // an approver
	DecidedByQuorum     Decider = "quorum"     // the approval that completed a quorum of approvers
	DecidedByTimeout    Decider = "timeout"    // nobody decided by the deadline
	DecidedByClassifier Decider = "classifier" // an agent's own classifier (Claude Code's auto mode)
	DecidedByChannel    Decider = "channel"    // an answer in the agent's own prompt, relayed by a channel
	// DecidedByReviewer is an automated reviewer the policy names
	// (reviewers:), acting as reviewer:<name> (ReviewerPrefix).
	DecidedByReviewer Decider = "reviewer"
)

// Deciders are every Decider.
var Deciders = []Decider{DecidedByRule, DecidedByGrant, DecidedByPolicy, DecidedByHuman, DecidedByQuorum, DecidedByTimeout, DecidedByClassifier, DecidedByChannel,
	DecidedByReviewer}

// WrittenBy reports whether the write that made e (its last transition,
// or the one before it in the same write) is the request requestID of
// actor (Decision.RequestID).
func (e *Entry) WrittenBy(requestID, actor string) bool {
	if requestID == "" {
		return false
	}
	for _, t := range []*Transition{e.LastTransition, e.PriorTransition} {
		if t != nil && t.Write == requestID && t.Actor == actor {
			return true
		}
	}
	return false
}

// validRequestID reports whether id is empty or at most 64 letters,
// digits, '-' and '_'.
func validRequestID(id string) bool {
	if len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// writeID returns a new Transition.Write.
func writeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Edit records what an approver changed of a call's arguments: the
// digests of the arguments before and after (ArgumentsDigest), and the
// top-level arguments that differ.
type Edit struct {
	From    string   `json:"from"`
	To      string   `json:"to"`
	Changed []string `json:"changed"`
}

// ArgumentsDigest is "sha256:" and the hex SHA-256 of a call's arguments
// in canonical JSON (keys sorted, no spaces), so that the same arguments
// however spaced or ordered have one digest.
func ArgumentsDigest(args json.RawMessage) string {
	var v any
	if len(args) == 0 || json.Unmarshal(args, &v) != nil {
		v = string(args) // not JSON: the bytes as they are
	}
	canon, _ := json.Marshal(v)
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Call is the call the entry holds, as an agent would submit it, with
// the arguments that run (an approver's edit, if any).
func (e *Entry) Call() Call {
	return Call{
		ToolCallID: e.ToolCallID, ToolName: e.ToolName, Arguments: e.ToolArguments, CallerBotID: e.CallerBotID,
		ConversationID: e.ConversationID, Team: e.Team, TaskID: e.TaskID, EstimatedCost: e.EstimatedCost, PermissionMode: e.PermissionMode,
	}
}

// Edited says what an approver changed of the call's arguments, or nil
// when they are the agent's.
func (e *Entry) Edited() *Edit {
	if len(e.OriginalArguments) == 0 {
		return nil
	}
	return &Edit{
		From:    ArgumentsDigest(e.OriginalArguments),
		To:      ArgumentsDigest(e.ToolArguments),
		Changed: changedArguments(e.OriginalArguments, e.ToolArguments),
	}
}

// changedArguments lists, sorted, the top-level arguments that differ
// between two argument objects (added, removed or changed).
func changedArguments(from, to json.RawMessage) []string {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(from, &a)
	_ = json.Unmarshal(to, &b)
	changed := []string{}
	for k, v := range a {
		if w, ok := b[k]; !ok || !SameJSON(v, w) {
			changed = append(changed, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	return changed
}

// Lease is an executor's claim on a running call. When it expires without
// the call finishing, another executor may reclaim the call.
type Lease struct {
	Holder    string `json:"holder"`
	ExpiresAt int64  `json:"expiresAt"`
}

// Runnable reports whether an executor may start the entry at now: approved,
// or scheduled and due.
func (e *Entry) Runnable(now time.Time) bool {
	switch e.Status {
	case StateApproved:
		return true
	case StateScheduled:
		return e.ScheduledExecutionTime <= now.UnixMilli()
	}
	return false
}

// Call is what an agent asks to run.
//
// Its ids are at most MaxID bytes, which their max tags say for the
// transports' bounds check (wire.CheckBounds).
type Call struct {
	ToolCallID     string          `json:"toolCallId,omitempty" max:"256"` // generated when empty
	ToolName       string          `json:"toolName" max:"128"`
	Arguments      json.RawMessage `json:"toolArguments,omitempty"`
	CallerBotID    string          `json:"callerBotId" max:"256"`
	ConversationID string          `json:"conversationId" max:"256"`
	Team           string          `json:"team,omitempty" max:"256"`
	// TaskID names the task the call is part of, within its
	// conversation: an approval with scope task covers later calls like
	// it of the same task.
	TaskID        string  `json:"taskId,omitempty" max:"256"`
	EstimatedCost float64 `json:"estimatedCost,omitempty"`
	// PermissionMode is the agent's mode for its conversation, as Claude
	// Code names them: default, acceptEdits, plan, bypassPermissions.
	PermissionMode string `json:"permissionMode,omitempty" max:"256"`
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidToolName reports whether name may name a tool: one plain subject
// token, since tools are named in subjects and metric labels.
func ValidToolName(name string) bool { return toolNameRE.MatchString(name) }

// validate checks the call and fills in what may be left out.
func (c *Call) validate() error {
	if !toolNameRE.MatchString(c.ToolName) {
		return invalidf("toolName: must be 1 to 128 letters, digits, '_' or '-', got %q", c.ToolName)
	}
	if c.ConversationID == "" || len(c.ConversationID) > MaxID {
		return invalidf("conversationId: must be 1 to %d bytes, got %d", MaxID, len(c.ConversationID))
	}
	if c.CallerBotID == "" || len(c.CallerBotID) > MaxID {
		return invalidf("callerBotId: must be 1 to %d bytes, got %d", MaxID, len(c.CallerBotID))
	}
	if len(c.Team) > MaxID {
		return invalidf("team: at most %d bytes, got %d", MaxID, len(c.Team))
	}
	if len(c.PermissionMode) > MaxID {
		return invalidf("permissionMode: at most %d bytes, got %d", MaxID, len(c.PermissionMode))
	}
	if len(c.TaskID) > MaxID {
		return invalidf("taskId: at most %d bytes, got %d", MaxID, len(c.TaskID))
	}
	if len(c.ToolCallID) > MaxID {
		return invalidf("toolCallId: at most %d bytes, got %d", MaxID, len(c.ToolCallID))
	}
	if c.EstimatedCost < 0 {
		return invalidf("estimatedCost: must be >= 0, got %v", c.EstimatedCost)
	}
	if len(c.Arguments) == 0 {
		c.Arguments = json.RawMessage("{}")
	}
	if err := validArguments(c.Arguments); err != nil {
		return err
	}
	if c.ToolCallID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		c.ToolCallID = "tg_" + hex.EncodeToString(b[:])
	}
	return nil
}

func validArguments(raw json.RawMessage) error {
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return invalidf("toolArguments: must be a JSON object")
	}
	return nil
}

// Scope is how far a human's approval reaches.
type Scope string

// The scopes of an approval.
const (
	ScopeOnce    Scope = "once"    // this call only
	ScopeTask    Scope = "task"    // and later calls like it of the same task (the call's taskId)
	ScopeSession Scope = "session" // and later calls like it in the conversation
	ScopeAlways  Scope = "always"  // and later calls like it in the team
)

// PendingID is the id of the entry for a tool call: the conversation's key,
// a dot, the tool call's key. Deriving it (rather than drawing a random one)
// makes a retried submit find the entry it already created, and lets a
// conversation's entries be listed by key prefix without scanning others.
func PendingID(conversationID, toolCallID string) string {
	return ConversationKey(conversationID) + "." + KeyToken(toolCallID)
}

// ConversationKey is the key prefix under which a conversation's entries live.
func ConversationKey(conversationID string) string { return KeyToken(conversationID) }

// MaxID is the longest a call's ids may be, in bytes: its conversation,
// caller, team, task and tool call ids. They become tokens of keys and
// subjects, which NATS bounds (a control line of 4 KiB by default).
const MaxID = 256

var plainToken = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// maxKeyToken is the longest token KeyToken makes without hashing: room
// for MaxID bytes encoded, with a prefix.
const maxKeyToken = 512

// KeyToken makes s one token of a KV key (or NATS subject): kept as it is
// when it is plain, else "=" and its unpadded base64url, which cannot
// collide with a plain one. A token that would be longer than 512
// characters is "==" and the base64url of s's SHA-256 instead (base64url
// has no "=", so it collides with neither), so no input, however long,
// makes a key or subject NATS refuses: ids are bounded at submit, but an
// entry an older version stored may hold a longer one.
func KeyToken(s string) string {
	if len(s) <= maxKeyToken && plainToken.MatchString(s) {
		return s
	}
	if base64.RawURLEncoding.EncodedLen(len(s)) < maxKeyToken {
		return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
	}
	sum := sha256.Sum256([]byte(s))
	return "==" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// ValidPendingID reports whether id has the shape PendingID gives.
func ValidPendingID(id string) bool {
	conv, call, ok := strings.Cut(id, ".")
	return ok && validToken(conv) && validToken(call)
}

func validToken(t string) bool {
	if len(t) > maxKeyToken {
		return false
	}
	if rest, ok := strings.CutPrefix(t, "="); ok {
		_, err := base64.RawURLEncoding.DecodeString(rest)
		return rest != "" && err == nil
	}
	return plainToken.MatchString(t)
}

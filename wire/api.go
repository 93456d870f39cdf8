package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// The request API: a NATS micro service named "toolgate" (so `nats micro
// ls` finds it) with one endpoint per command, each on toolgate.<name>.
// Requests and replies are JSON; a refusal is a reply with the
// Nats-Service-Error-Code header set to an HTTP-like status and an
// ErrorBody naming the problem.
const (
	ServiceName = "toolgate"

	EndpointSubmit             = "submit"
	EndpointGet                = "get"
	EndpointList               = "list"
	EndpointDecide             = "decide"
	EndpointDecideMatching     = "decide_matching"
	EndpointGrantsList         = "grants_list"
	EndpointGrantsRevoke       = "grants_revoke"
	EndpointGrantsPreview      = "grants_preview"
	EndpointCancel             = "cancel"
	EndpointCancelConversation = "cancel_conversation"
	EndpointStarted            = "started"
	EndpointHeartbeat          = "heartbeat"
	EndpointSucceeded          = "succeeded"
	EndpointFailed             = "failed"
	EndpointRetry              = "retry"
	EndpointBudgets            = "budgets"
	EndpointRateLimits         = "rate_limits"
	EndpointAnalytics          = "analytics"
	EndpointPolicyGet          = "policy_get"
	EndpointPolicySet          = "policy_set"
	EndpointDeniedTools        = "denied_tools"
	EndpointWork               = "work"
	EndpointCredsAdd           = "creds_add"
	EndpointCredsList          = "creds_list"
	EndpointCredsRevoke        = "creds_revoke"
)

// APISubject is the subject of an endpoint.
func APISubject(endpoint string) string { return ServiceName + "." + endpoint }

// GetRequest asks for one entry.
type GetRequest struct {
	PendingID string `json:"pendingId"`
}

// ListRequest filters entries; every field is optional. With a
// conversation only its keys are read; without one, every entry is. The
// reply is a page (ListReply): Limit entries at most (default 200, at most
// 1000), fewer when they are large, and a cursor for the next.
type ListRequest struct {
	ConversationID string        `json:"conversationId,omitempty"`
	ToolName       string        `json:"toolName,omitempty"`
	CallerBotID    string        `json:"callerBotId,omitempty"`
	Status         machine.State `json:"status,omitempty"`
	Limit          int           `json:"limit,omitempty"`
	Cursor         string        `json:"cursor,omitempty"`
}

// DecideRequest approves or rejects a pending call.
type DecideRequest struct {
	PendingID string `json:"pendingId"`
	// Approved must be given, true or false, unless Result answers the
	// call: a decision that leaves it out is refused (CheckRequest).
	Approved  bool            `json:"approved"`
	By        string          `json:"by"`
	Reason    string          `json:"reason,omitempty" max:"4096"`
	Scope     machine.Scope   `json:"scope,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ForMs bounds the grant a session or always approval records.
	ForMs int64 `json:"forMs,omitempty"`
	// PersistRule writes an always approval into the policy as an allow
	// rule instead of a grant (admins only).
	PersistRule bool `json:"persistRule,omitempty"`
	// SingleUse makes the grant good for one call.
	SingleUse bool `json:"singleUse,omitempty"`
	// GrantMatch narrows the grant (or rule) a task, session or always
	// approval records to the later calls whose argument it covers: the
	// specifier of a pattern in rule syntax (send_email(*@acme-corp.com)
	// for "*@acme-corp.com"), read from the argument GrantPreview names.
	// It must cover the call approved. Empty: the pattern derived from the
	// call (GrantPreview's).
	GrantMatch string `json:"grantMatch,omitempty" max:"1024"`
	// RequestID, when set, names this decision across the times it is
	// sent: a decision sent again after its answer was lost is answered
	// with the entry it wrote, not refused as a conflict with itself.
	// Letters, digits, '-' and '_'.
	RequestID string `json:"requestId,omitempty" max:"64"`

	// Result, when set, answers a respondable call with the tool's
	// result instead of approving or rejecting it: the call ends
	// COMPLETED_SUCCESS with it and never runs. Any JSON value, at most
	// machine.MaxResponse bytes; approved is then false.
	Result json.RawMessage `json:"result,omitempty"`
	// Interrupt, on a rejection, asks the agent to stop its turn, not
	// only this call.
	Interrupt bool `json:"interrupt,omitempty"`
}

// checkJSON refuses a decision that says neither approved (true or false)
// nor a result to answer the call with: a rejection is never read into
// a field left out.
func (r *DecideRequest) checkJSON(data []byte) error {
	if len(r.Result) > 0 {
		return nil
	}
	return requireApproved(data, "true or false (or a result, to answer the call with it)")
}

// RespondRequest approves or rejects the call PendingID of the
// conversation ConversationID (the reference design's decision, POST
// /v1/respond): a call of another conversation is not found.
type RespondRequest struct {
	ConversationID string `json:"conversationId"`
	PendingID      string `json:"pendingId"`
	Approved       bool   `json:"approved"`
	Reason         string `json:"reason,omitempty" max:"4096"`
}

// checkJSON refuses a response that does not say approved.
func (r *RespondRequest) checkJSON(data []byte) error {
	return requireApproved(data, "true or false")
}

// Grant is a standing yes an approval recorded: a session grant
// (ConversationID set) or an "always" one for a team. It covers the calls
// Pattern covers until ExpiresAt (0: until revoked).
type Grant struct {
	ID             string `json:"id"`
	Pattern        string `json:"pattern"`
	ConversationID string `json:"conversationId,omitempty"`
	Team           string `json:"team,omitempty"`
	TaskID         string `json:"taskId,omitempty"` // a task grant: the calls of this task only
	By             string `json:"by"`
	At             int64  `json:"at,omitempty"`
	PendingID      string `json:"pendingId,omitempty"` // the call whose approval granted it
	ExpiresAt      int64  `json:"expiresAt,omitempty"`
	SingleUse      bool   `json:"singleUse,omitempty"` // consumed by the one call it lets run
	// Argument is the argument a narrowed grant's specifier reads on a
	// tool that is not built in (see DecideRequest.GrantMatch).
	Argument string `json:"argument,omitempty"`
}

// GrantsRequest lists the grants in force, a conversation's when given.
type GrantsRequest struct {
	ConversationID string `json:"conversationId,omitempty"`
}

// GrantPreviewRequest asks what an approval of PendingID with Scope
// (task, session or always) would grant, before anyone grants it.
type GrantPreviewRequest struct {
	PendingID string        `json:"pendingId"`
	Scope     machine.Scope `json:"scope"`
	// Match narrows the grant previewed, as DecideRequest.GrantMatch.
	Match string `json:"match,omitempty" max:"1024"`
}

// GrantPreview is the grant an approval would record: the tool, the
// pattern in rule syntax derived from the call (what later calls it
// covers), and what bounds it (a conversation and task, or a team).
type GrantPreview struct {
	PendingID      string        `json:"pendingId"`
	ToolName       string        `json:"toolName"`
	Scope          machine.Scope `json:"scope"`
	Pattern        string        `json:"pattern"`
	ConversationID string        `json:"conversationId,omitempty"`
	TaskID         string        `json:"taskId,omitempty"`
	Team           string        `json:"team,omitempty"`
	// Argument names the argument of the call a grant may be narrowed
	// by (Match, DecideRequest.GrantMatch): a built-in tool's own
	// (command, file_path, url, …), else the policy's matchArgument for
	// the tool; "" when nothing names one, and a grant covers the whole
	// tool.
	Argument string `json:"argument,omitempty"`
}

// RevokeGrantRequest ends a grant.
type RevokeGrantRequest struct {
	ID string `json:"id"`
}

// DecideMatchingRequest approves or rejects every call pending approval
// that Match covers at this moment (in rule syntax, as an allow rule
// covers a call: "web_search", "Bash(git push *)"), narrowed by the other
// fields when set; or, instead of Match, the calls IDs names (an inbox's
// selection), which the other filters do not narrow. DryRun lists what
// would be decided and decides nothing.
type DecideMatchingRequest struct {
	Match          string   `json:"match,omitempty"`
	IDs            []string `json:"ids,omitempty"`
	ConversationID string   `json:"conversationId,omitempty"`
	Team           string   `json:"team,omitempty"`
	CallerBotID    string   `json:"callerBotId,omitempty"`
	Approved       bool     `json:"approved"`
	By             string   `json:"by,omitempty"`
	Reason         string   `json:"reason,omitempty" max:"4096"`
	DryRun         bool     `json:"dryRun,omitempty"`
}

// DecideMatchingReply accounts for every call the request matched: each
// is decided, voted on, or skipped with why (in a dry run: would be). A
// call under a quorum that the decision does not settle is voted on: the
// decision counts as one approver's vote, and the call stays pending,
// waiting for the others (its entry says what it still needs).
type DecideMatchingReply struct {
	Decided []MatchedCall `json:"decided"`
	Voted   []MatchedCall `json:"voted"`
	Skipped []MatchedCall `json:"skipped"`
	DryRun  bool          `json:"dryRun,omitempty"`
}

// MatchedCall is one call a DecideMatchingRequest matched or named: the
// entry as the decision left it (or as it was found), and for a skipped
// one the refusal's code (conflict: already decided; forbidden: not this
// approver's; edit_denied; expired; not_found: an ID no call has) and
// message.
type MatchedCall struct {
	PendingID string         `json:"pendingId"`
	Entry     *machine.Entry `json:"entry,omitempty"` // absent: no such call (not_found)
	Code      string         `json:"code,omitempty"`
	Reason    string         `json:"reason,omitempty"`
}

// CancelRequest cancels one call (PendingID) or every call of a
// conversation that has not started running (ConversationID).
type CancelRequest struct {
	PendingID      string `json:"pendingId,omitempty"`
	ConversationID string `json:"conversationId,omitempty"`
	By             string `json:"by,omitempty"`
	Reason         string `json:"reason,omitempty" max:"4096"`
}

// CancelConversationReply says what a conversation's cancel did.
type CancelConversationReply struct {
	Cancelled []*machine.Entry `json:"cancelled"`
	// Running calls cannot be cancelled; their executors see the
	// conversation's cancel and stop them.
	Running []*machine.Entry `json:"running"`
}

// ReportRequest is an agent or executor reporting on a call it runs:
// started (claims it), heartbeat, retry (after a failed attempt),
// succeeded or failed.
type ReportRequest struct {
	PendingID string `json:"pendingId"`
	By        string `json:"by"`
	LeaseMs   int64  `json:"leaseMs,omitempty"` // started, heartbeat, retry: default 1 hour
	Attempt   int    `json:"attempt,omitempty"` // retry: the attempt that failed
	// Revision (started) is the revision of the entry as the claimant
	// last saw it: a hint that spares toolgate a read when it still holds the
	// entry at that revision; the claim is checked against the entry as
	// it is, whatever the hint.
	Revision uint64          `json:"revision,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty" max:"65536"`
	Cost     float64         `json:"cost,omitempty"`
	// OutcomeUnknown (failed) says the run was stopped midway, its
	// executor cut off from toolgate, and may have done its work: the
	// call ends with its outcome unknown (machine.Entry.OutcomeUnknown).
	OutcomeUnknown bool `json:"outcomeUnknown,omitempty"`
}

// ErrorBody is the body of a refusal.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names a refusal: a code (invalid, not_found, conflict, expired,
// idempotency_conflict, forbidden, storage_full, unavailable, internal), what was wrong, and the entry as it is now when
// the refusal is a conflict with it.
type ErrorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Entry   *machine.Entry `json:"entry,omitempty"`
}

// ErrorStatus maps a domain error to an HTTP-like status and a code.
func ErrorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, machine.ErrInvalid):
		return 400, "invalid"
	case errors.Is(err, machine.ErrEditDenied):
		return 403, "edit_denied"
	case errors.Is(err, machine.ErrForbidden):
		return 403, "forbidden"
	case errors.Is(err, machine.ErrNotFound):
		return 404, "not_found"
	case errors.Is(err, machine.ErrExpired):
		return 409, "expired"
	case errors.Is(err, machine.ErrIdempotencyConflict):
		return 409, "idempotency_conflict"
	case errors.Is(err, machine.ErrConflict), errors.Is(err, machine.ErrExists):
		return 409, "conflict"
	case errors.Is(err, ErrStorageFull):
		return 507, "storage_full"
	case errors.Is(err, ErrUnavailable):
		return 503, "unavailable"
	default:
		return 500, "internal"
	}
}

// codeErrors maps a refusal's code back to the domain error, so that a
// client's errors.Is works across the wire.
var codeErrors = map[string]error{
	"invalid":              machine.ErrInvalid,
	"forbidden":            machine.ErrForbidden,
	"edit_denied":          machine.ErrEditDenied,
	"not_found":            machine.ErrNotFound,
	"conflict":             machine.ErrConflict,
	"expired":              machine.ErrExpired,
	"idempotency_conflict": machine.ErrIdempotencyConflict,
	"storage_full":         ErrStorageFull,
	"unavailable":          ErrUnavailable,
}

// APIError is a refusal received from the service.
type APIError struct {
	Status int
	ErrorDetail
}

func (e *APIError) Error() string { return e.Message }

// Unwrap returns the domain error the code stands for.
func (e *APIError) Unwrap() error { return codeErrors[e.Code] }

// ListReply is a page of entries, oldest first.
type ListReply struct {
	Items []*machine.Entry `json:"items"`
	// NextCursor, when set, asks for the next page.
	NextCursor string `json:"nextCursor,omitempty"`
}

// ListPage is a page of entries with the TOOL_EVENTS sequence read before
// them (GET /v1/tool-calls): a client that then follows the events from
// EventsSeq on misses nothing.
type ListPage struct {
	ListReply
	EventsSeq uint64 `json:"eventsSeq"`
}

// CancelSubject is where a conversation's cancel is announced (core NATS,
// a CancelConversationReply) so that executors stop its running calls,
// which no transition can cancel.
const CancelSubject = "toolgate.control.cancel"

// WithdrawSubject is where the process that an executor's withdrawal
// reached tells every process serving the request API of it (core NATS,
// a Withdrawal), so that each ends the requests of that executor waiting
// on it. Only toolgate's own account hears it or publishes to it.
const WithdrawSubject = "toolgate.control.withdraw"

// Withdrawal is an executor's withdrawal of its requests for work: the
// holder they claim for, and their tools.
type Withdrawal struct {
	Holder string   `json:"holder"`
	Tools  []string `json:"tools"`
}

// The headers a refusal carries: those of nats.go's micro package, which
// serves the request API.
const (
	ErrorCodeHeader = "Nats-Service-Error-Code"
	ErrorHeader     = "Nats-Service-Error"
)

// DecodeReply reads a reply's data into v, or returns the *APIError a
// refusal carries in its headers and body.
func DecodeReply(header map[string][]string, data []byte, v any) error {
	first := func(k string) string {
		if vs := header[k]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	if code := first(ErrorCodeHeader); code != "" {
		status, _ := strconv.Atoi(code)
		var body ErrorBody
		if err := json.Unmarshal(data, &body); err != nil || body.Error.Message == "" {
			body.Error = ErrorDetail{Code: "internal", Message: first(ErrorHeader)}
		}
		return &APIError{Status: status, ErrorDetail: body.Error}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	return nil
}

// HistoryItem is one transition of an entry, with the revision that
// recorded it.
type HistoryItem struct {
	machine.Transition
	Revision uint64 `json:"revision"`
}

// RevisionHeader carries, on a get's reply, the revision of the entry it
// holds: Await orders what it reads by it.
const RevisionHeader = "Toolgate-Revision"

// EntrySubject is where every revision of one entry is announced (core
// NATS, an Event) for agents awaiting it: under its caller's name, so
// that an agent's credential may hear its own calls and no other's.
func EntrySubject(caller, pendingID string) string {
	return EntrySubjectPrefix + machine.KeyToken(caller) + "." + pendingID
}

// EntrySubjectPrefix starts every EntrySubject.
const EntrySubjectPrefix = "toolgate.entry."

// BudgetsRequest asks for the budget ledger: one team's days when Team is
// set ("" is the team of calls that name none), every team's otherwise.
type BudgetsRequest struct {
	Team *string `json:"team,omitempty"`
}

// Budget is one team's spending on one UTC day, beside the daily limit its
// policy sets now (none when Limit is nil).
type Budget struct {
	Team     string   `json:"team"`
	Day      string   `json:"day"` // YYYY-MM-DD
	Limit    *float64 `json:"limit,omitempty"`
	Reserved float64  `json:"reserved"` // estimated cost of calls allowed and not yet finished
	Spent    float64  `json:"spent"`    // actual cost of calls finished
}

// BudgetsReply is the budget ledger, by team and then day.
type BudgetsReply struct {
	Items []Budget `json:"items"`
}

// RateLimitsRequest asks for the rate rules of the policy in force and
// their counters.
type RateLimitsRequest struct{}

// RateLimit is one rate rule of the policy in force (policy.RateLimit),
// with its counters that hold a slot now.
type RateLimit struct {
	// Rule names it as verdict reasons do: rateLimits[0] "Bash(rm *)" (teams.ops).
	Rule string `json:"rule"`
	// Source is the scope of the document it is in: default, teams.ops, conversations.c1.
	Source string `json:"source"`
	Index  int    `json:"index"` // in its scope's list
	Match  string `json:"match"`
	Max    int    `json:"max"`
	Per    string `json:"per"` // as written: 10m
	// Scope is what it counts apart: team, conversation, caller or all.
	Scope string `json:"scope"`
	Then  string `json:"then"` // ask or deny
	// Counters are its windows with a slot held now, the fullest first.
	Counters []RateCount `json:"counters"`
}

// RateCount is one counter of a rate rule: the slots held now in the
// window of one team, conversation or caller (or of all calls).
type RateCount struct {
	Value   string `json:"value"`   // the team, conversation or caller; "" for scope all
	Count   int    `json:"count"`   // slots held now
	FreesAt int64  `json:"freesAt"` // when the oldest of them is freed, epoch milliseconds
}

// RateLimitsReply lists the rate rules: the default scope's, then each
// team's and each conversation's, by name.
type RateLimitsReply struct {
	Items []RateLimit `json:"items"`
}

// PolicyGetRequest asks for the policy in force. Its secrets (a channel's
// secret, a Slack channel's URL) are redacted unless ShowSecrets, which
// only an admin may ask for; references to secrets (env:NAME, file:PATH)
// are shown either way.
type PolicyGetRequest struct {
	ShowSecrets bool `json:"showSecrets,omitempty"`
}

// DeniedToolsRequest asks which of Tools the policy in force denies
// whatever a call's arguments, for calls of Team in ConversationID under
// PermissionMode (empty: the policy's): what an agent or a gateway leaves
// out of the tools it offers a model, without reading the policy.
type DeniedToolsRequest struct {
	Tools          []string `json:"tools"`
	Team           string   `json:"team,omitempty"`
	ConversationID string   `json:"conversationId,omitempty"`
	PermissionMode string   `json:"permissionMode,omitempty"`
}

// MaxDeniedTools bounds the tools one DeniedToolsRequest asks about.
const MaxDeniedTools = 4096

// DeniedToolsReply names the tools denied outright, each with the rule or
// field that denies it (as a REJECTED_BY_POLICY entry's statusReason
// would); a tool not named is decided call by call.
type DeniedToolsReply struct {
	Denied map[string]string `json:"denied"`
	// Unreadable names the tools the policy has rules on the arguments of
	// without naming the argument they read (no matchArgument): each with
	// what to add to the policy. Those rules deny or ask about every call
	// of the tool, and allow none.
	Unreadable map[string]string `json:"unreadable,omitempty"`
}

// PolicyDocument is the policy in force, or one to put in force: the
// document as YAML (or JSON, which is YAML too), and the revision it is
// stored at (0: none stored, the built-in defaults apply).
type PolicyDocument struct {
	Document string `json:"document" max:"1048576"`
	Revision uint64 `json:"revision,omitempty"`
}

// Role is what an identity may do. A NATS credential carries one, in its
// user JWT's tags; an HTTP token carries one or more.
type Role string

// The roles. An admin holds them all.
const (
	RoleAgent    Role = "agent"    // submits calls and sees, cancels and runs its own
	RoleExecutor Role = "executor" // claims and runs any runnable call
	RoleApprover Role = "approver" // decides and cancels any call, and reads them
	RoleViewer   Role = "viewer"   // reads calls, events, budgets and the policy
	RoleAdmin    Role = "admin"    // everything, the policy and credentials too
)

// RoleTagPrefix starts the tag of a NATS user JWT that names its
// role: role:approver.
const RoleTagPrefix = "role:"

// InboxPrefix is the prefix of the inboxes an identity hears replies on:
// the only one its NATS credential may subscribe to.
func InboxPrefix(name string) string { return "_INBOX_" + name }

// Roles are all the roles, in the order the documentation lists them.
var Roles = []Role{RoleAgent, RoleExecutor, RoleApprover, RoleViewer, RoleAdmin}

// Identity is a NATS credential toolgate issued: who holds it, in which
// role, and whether it was revoked.
type Identity struct {
	Name      string `json:"name"`
	Role      Role   `json:"role"`
	Key       string `json:"key"` // the credential's public nkey
	IssuedAt  int64  `json:"issuedAt"`
	IssuedBy  string `json:"issuedBy"`
	RevokedAt int64  `json:"revokedAt,omitempty"`
	RevokedBy string `json:"revokedBy,omitempty"`
}

// CredsRequest asks for a new credential (creds_add: name and role) or
// revokes every credential of a name (creds_revoke: name).
type CredsRequest struct {
	Name string `json:"name"`
	Role Role   `json:"role,omitempty"`
}

// CredsReply is a new credential: its identity and its .creds file, which
// toolgate does not keep.
type CredsReply struct {
	Identity Identity `json:"identity"`
	Creds    string   `json:"creds"`
}

// IdentitiesReply lists credentials, and revokes: those it changed.
type IdentitiesReply struct {
	Items []Identity `json:"items"`
}

// WorkRequest asks toolgate for calls to run: it claims up to Max
// runnable calls of Tools for By (under the credential's name, as every
// claim), each with a lease of LeaseMs, and answers them; with none
// runnable, it waits up to WaitMs for one, and answers none.
type WorkRequest struct {
	Tools   []string `json:"tools"`
	Max     int      `json:"max,omitempty"`    // 1 to MaxWorkBatch; default 1
	WaitMs  int64    `json:"waitMs,omitempty"` // 0 to MaxWorkWait; default 0, answer at once
	LeaseMs int64    `json:"leaseMs"`
	By      string   `json:"by,omitempty"`
	// Running names the calls the executor has in hand (claimed for it,
	// their outcome not yet recorded). A call running under By's lease
	// that is not among them, for longer than an answer takes to arrive,
	// was claimed for it in an answer that never did (the connection it
	// was on broke): toolgate hands it again, as it is, with no wait.
	Running []string `json:"running,omitempty"`
	// Withdraw, instead, ends the requests of By for work of Tools that
	// wait at toolgate, answered with no calls, and claims nothing: an
	// executor that stops sends it, so that no call is claimed for it
	// meanwhile, to wait out a lease that nobody holds.
	Withdraw bool `json:"withdraw,omitempty"`
}

// The bounds of a WorkRequest.
const (
	MaxWorkBatch = 256
	MaxWorkWait  = 20 * time.Second
)

// WorkReply is the calls toolgate claimed for a WorkRequest.
type WorkReply struct {
	Calls []WorkClaim `json:"calls"`
}

// WorkClaim is one claimed call: the entry as the claim left it, and
// since when it was runnable (Unix ms, toolgate's clock): when it was
// approved, came due, or its last executor's lease ran out.
type WorkClaim struct {
	Entry         *machine.Entry `json:"entry"`
	RunnableSince int64          `json:"runnableSince"`
	// Again marks a call claimed earlier, whose first answer was lost
	// (WorkRequest.Running): its lease counts from its claim, the
	// entry's lastAttemptTime.
	Again bool `json:"again,omitempty"`
}

// ArchivedCall is a finished call as the archive keeps it once it left
// tool_calls (the retention window after it finished): the entry as it
// was last written, with its receipts (the signed record of every
// transition), and that revision. History holds the transitions of a
// call without receipts, read from the bucket's revisions.
type ArchivedCall struct {
	Entry      *machine.Entry `json:"entry"`
	Revision   uint64         `json:"revision"`
	History    []HistoryItem  `json:"history,omitempty"`
	ArchivedAt int64          `json:"archivedAt"`
}

// AnalyticsRequest asks for the analytics report (GET /v1/analytics's)
// over the Hours ending at Until (0: the default, a day), its series at
// Resolution.
type AnalyticsRequest struct {
	Hours int `json:"hours,omitempty"`
	// Resolution is the series' step: AnalyticsByHour (the default) or
	// AnalyticsByMinute.
	Resolution string `json:"resolution,omitempty"`
	// Until ends the window, in epoch milliseconds (0: now).
	Until int64 `json:"until,omitempty"`
}

// The bounds of an analytics report's window: a day when none is asked
// for, at most 31 days, and a day at minute resolution.
const (
	DefaultAnalyticsHours   = 24
	MaxAnalyticsHours       = 31 * 24
	MaxAnalyticsMinuteHours = 24
)

// The resolutions of an analytics report's series.
const (
	AnalyticsByHour   = "hour"
	AnalyticsByMinute = "minute"
)

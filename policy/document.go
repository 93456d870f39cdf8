package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/machine"
)

// Document is a whole policy: the default scope, and overrides per team and
// per conversation. The narrowest scope that sets a field wins; see Resolve.
type Document struct {
	Default       *Policy            `yaml:"default,omitempty" json:"default,omitempty"`
	Teams         map[string]*Policy `yaml:"teams,omitempty" json:"teams,omitempty"`
	Conversations map[string]*Policy `yaml:"conversations,omitempty" json:"conversations,omitempty"`
}

// Policy is the settings of one scope. Every field is optional, and a pointer
// or nil-able type, so that "not set here" (inherit from the wider scope)
// differs from an explicit zero, false or empty list (override it).
type Policy struct {
	// RequiresApprovalTools lists the tools a human must approve, or is
	// "all" or "none". Built-in default: all, so that a document of only
	// allow rules asks about everything else, as Claude Code does.
	RequiresApprovalTools *ToolSet `yaml:"requiresApprovalTools,omitempty" json:"requiresApprovalTools,omitempty"`
	// ApprovalTimeoutMs is how long an asked call waits for a human.
	ApprovalTimeoutMs *int64 `yaml:"approvalTimeoutMs,omitempty" json:"approvalTimeoutMs,omitempty"`
	// AutoRejectOnTimeout rejects an unanswered call at the timeout; when
	// false the timeout only flags it.
	AutoRejectOnTimeout *bool `yaml:"autoRejectOnTimeout,omitempty" json:"autoRejectOnTimeout,omitempty"`
	// ApprovalReminderPercent is how far into its approval timeout a call
	// still pending is notified again (default 80; 0: no reminder).
	ApprovalReminderPercent *int `yaml:"approvalReminderPercent,omitempty" json:"approvalReminderPercent,omitempty"`
	// DefaultDelayMs delays calls that run without anybody's say-so,
	// leaving a window to cancel them.
	DefaultDelayMs *int64 `yaml:"defaultDelayMs,omitempty" json:"defaultDelayMs,omitempty"`
	// ToolSpecificDelays overrides DefaultDelayMs per tool. Merged per key
	// across scopes.
	ToolSpecificDelays map[string]int64 `yaml:"toolSpecificDelays,omitempty" json:"toolSpecificDelays,omitempty"`
	// ReadOnlyTools run without asking (and are all plan mode allows).
	ReadOnlyTools Names `yaml:"readOnlyTools,omitempty" json:"readOnlyTools,omitzero"`
	// EditTools are the tools acceptEdits mode runs without asking.
	EditTools Names `yaml:"editTools,omitempty" json:"editTools,omitzero"`
	// Rules are permission rules in Claude Code's syntax. Unlike the other
	// fields they add up across scopes rather than override.
	Rules Rules `yaml:"rules,omitempty" json:"rules,omitzero"`
	// Describe holds, per tool, a text/template over the call's arguments
	// that says in one line what the call does. Merged per key.
	Describe map[string]string `yaml:"describe,omitempty" json:"describe,omitempty"`
	// MatchArgument names, per tool or MCP server (mcp__server, for every
	// tool of it), the argument a specifier is matched against, for tools
	// whose argument is not built in; a specifier on such a tool needs
	// it (see readable.go). Merged per key.
	MatchArgument map[string]string `yaml:"matchArgument,omitempty" json:"matchArgument,omitempty"`
	// Redact names arguments whose values people are shown masked, beside the built-in secret names and shapes: a path from the
	// arguments' root ("$.headers.Authorization", "$.*.key") or a key name
	// anywhere ("*token*"), globs, case ignored. Unlike most fields, the
	// scopes' lists add up.
	Redact Names `yaml:"redact,omitempty" json:"redact,omitzero"`
	// Reveal names the roles (admin, approver, viewer) that may ask for
	// the arguments of one call in clear, which toolgate records. Default:
	// admin; an empty list: nobody. An admin holds every role, so may
	// whenever anyone may. The narrowest scope that sets it wins.
	Reveal Names `yaml:"reveal,omitempty" json:"reveal,omitzero"`
	// Editable says, per tool, whether an approver may edit a call's
	// arguments when approving it; every tool may be edited unless this
	// says false. Merged per key.
	Editable map[string]bool `yaml:"editable,omitempty" json:"editable,omitempty"`
	// Risk attaches a risk (high, medium or low) to the calls a pattern
	// in rule syntax matches ("transfer_funds", "Bash(git push *)"):
	// approvers see it first. Merged per key; a call several patterns
	// match carries the highest.
	Risk map[string]machine.Risk `yaml:"risk,omitempty" json:"risk,omitempty"`
	// RateLimits cap how often the calls a pattern matches may be
	// attempted, counted swarm-wide (see RateLimit). The scopes' lists add up.
	RateLimits []RateLimit `yaml:"rateLimits,omitempty" json:"rateLimits,omitempty"`
	// RequireApprovalAboveCost asks about any call whose estimated cost is
	// above it, even one a rule or grant would run.
	RequireApprovalAboveCost *float64 `yaml:"requireApprovalAboveCost,omitempty" json:"requireApprovalAboveCost,omitempty"`
	// DailyCostLimit caps a team's estimated spend per UTC day on calls that
	// run without asking; past it, calls ask.
	DailyCostLimit *float64 `yaml:"dailyCostLimit,omitempty" json:"dailyCostLimit,omitempty"`
	// Approvers are the users who may decide asked calls.
	Approvers Names `yaml:"approvers,omitempty" json:"approvers,omitzero"`
	// UserIDToApprove is the one user who may decide asked calls.
	UserIDToApprove *string `yaml:"userIdToApprove,omitempty" json:"userIdToApprove,omitempty"`
	// Quorum asks, of the calls a pattern in rule syntax matches, for
	// that many distinct approvals before they run (see quorum.go).
	// Merged per key.
	Quorum map[string]QuorumRule `yaml:"quorum,omitempty" json:"quorum,omitempty"`
	// Escalate widens, tier by tier, who may decide a call nobody has
	// decided. The narrowest scope that sets it wins.
	Escalate Tiers `yaml:"escalate,omitempty" json:"escalate,omitzero"`
	// MaxExecutionAttempts bounds how often a call is claimed by executors.
	MaxExecutionAttempts *int `yaml:"maxExecutionAttempts,omitempty" json:"maxExecutionAttempts,omitempty"`
	// PermissionMode applies to calls that do not name their own.
	PermissionMode *Mode `yaml:"permissionMode,omitempty" json:"permissionMode,omitempty"`
	// DisableBypassPermissionsMode makes a call's bypassPermissions mode
	// count as default: the agent being gated should not be able to switch
	// the gate off by saying so.
	DisableBypassPermissionsMode *bool `yaml:"disableBypassPermissionsMode,omitempty" json:"disableBypassPermissionsMode,omitempty"`
	// Notify lists the channels told when a call waits for a human, and
	// when it stops waiting. Like the other lists, the narrowest scope
	// that sets it replaces the wider ones' list: "notify: []" mutes a
	// team or conversation.
	Notify Channels `yaml:"notify,omitempty" json:"notify,omitzero"`
	// Currency is the ISO 4217 code the calls' costs are counted in
	// (EUR, USD): shown with every cost. The narrowest scope that sets it
	// wins.
	Currency *string `yaml:"currency,omitempty" json:"currency,omitempty"`
	// InboxURL is the web inbox's base URL, which notifications link to
	// (<inboxUrl>/#/calls/<pendingId>). Without it they carry no links.
	InboxURL *string `yaml:"inboxUrl,omitempty" json:"inboxUrl,omitempty"`

	// Flows are rules over sequences of calls: a call that follows
	// another within a window, in the same conversation or of the same
	// caller, is asked about or denied (see flow.go). The scopes' lists
	// add up.
	Flows []Flow `yaml:"flows,omitempty" json:"flows,omitempty"`
	// The decisions beside approve and reject (decisions.go).
	//
	// OnTimeout says, per pattern in rule syntax, what the timer does
	// with an asked call nobody decided by its deadline: reject, cancel,
	// or approve (never a call a deny rule, a quorum or a high risk
	// covers). Merged per key; where several patterns match a call, the
	// safest outcome wins (reject, then cancel, then approve).
	OnTimeout map[string]machine.TimeoutOutcome `yaml:"onTimeout,omitempty" json:"onTimeout,omitempty"`
	// NoGrants lists the patterns (rule syntax) whose calls an approver
	// approves once only: no task, session or always grant, and no rule
	// written from an approval. The narrowest scope that sets it wins.
	NoGrants Names `yaml:"noGrants,omitempty" json:"noGrants,omitzero"`
	// NoGrantsAtRisk is the risk from which calls are approved once only:
	// high (the default), medium, low (every call with a risk), or none.
	NoGrantsAtRisk *string `yaml:"noGrantsAtRisk,omitempty" json:"noGrantsAtRisk,omitempty"`
	// Respondable lists the patterns whose asked calls an approver may
	// answer with the tool's result instead of running them. The
	// narrowest scope that sets it replaces the wider ones' list.
	Respondable Names `yaml:"respondable,omitempty" json:"respondable,omitzero"`
	// Idempotent lists the patterns whose calls may run twice without
	// harm: only such a call is run again by another executor when the
	// one running it is lost before it reports (idempotent.go). The
	// narrowest scope that sets it replaces the wider ones' list.
	Idempotent Names `yaml:"idempotent,omitempty" json:"idempotent,omitzero"`

	// Reviewers are automated reviewers of the calls the policy asks
	// about (reviewers.go). Like notify, the narrowest scope that sets
	// the list wins.
	Reviewers Reviewers `yaml:"reviewers,omitempty" json:"reviewers,omitzero"`
}

// Channel is somewhere notifications go.
type Channel struct {
	// Type is how the channel is spoken to: webhook, slack, ntfy or email.
	Type ChannelType `yaml:"type" json:"type"`
	// URL is the webhook's address, the Slack incoming webhook's, the
	// ntfy server's base (the topic is appended), or the SMTP server's
	// (smtp://host:port, smtps://host:port).
	URL string `yaml:"url" json:"url"`
	// Secret signs a webhook's deliveries (Standard Webhooks: a whsec_
	// secret, see NewWebhookSecret; a webhook needs it or Secrets); for
	// ntfy it is an access token sent as a bearer token (optional); for
	// email, the SMTP password of Username. Slack takes none: its URL is
	// the secret.
	Secret string `yaml:"secret,omitempty" json:"secret,omitempty"`
	// Secrets are a webhook's signing secrets besides Secret: every one
	// signs each delivery, so a receiver verifies with any of them, and a
	// secret is rotated by adding the new one, moving the receiver to it,
	// and removing the old.
	Secrets []string `yaml:"secrets,omitempty" json:"secrets,omitempty"`
	// LegacySignature adds to a webhook's deliveries the headers toolgate
	// signed with before Standard Webhooks (X-Toolgate-Signature and
	// X-Toolgate-Timestamp), keyed with the bytes of the first secret, for
	// receivers not yet moved. Deprecated: it goes in the next release.
	LegacySignature bool `yaml:"legacySignature,omitempty" json:"legacySignature,omitempty"`
	// Format is what a webhook's body is: the event envelope as published
	// (absent), or cloudevents, the envelope as the data of a structured
	// CloudEvent 1.0 (application/cloudevents+json), signed the same way.
	Format WebhookFormat `yaml:"format,omitempty" json:"format,omitempty"`
	// Topic is the ntfy topic (ntfy only, required there).
	Topic string `yaml:"topic,omitempty" json:"topic,omitempty"`
	// Approver is the toolgate identity a webhook's or an ntfy channel's
	// one-time decision links decide as. Without it, the channel's
	// notifications carry no decision links.
	Approver string `yaml:"approver,omitempty" json:"approver,omitempty"`
	// SigningSecret is the Slack app's signing secret (Slack only): with
	// it, the card's buttons decide in Slack, through toolgate's
	// interactivity endpoint, as SlackUsers maps the clicking user.
	SigningSecret string `yaml:"signingSecret,omitempty" json:"signingSecret,omitempty"`
	// SlackUsers maps Slack user ids (U…, W…) to the toolgate identities
	// they decide as (Slack only, with SigningSecret).
	SlackUsers map[string]string `yaml:"slackUsers,omitempty" json:"slackUsers,omitempty"`
	// From is the address an email channel's messages come from.
	From string `yaml:"from,omitempty" json:"from,omitempty"`
	// To are the addresses an email channel sends to, a message each.
	To []string `yaml:"to,omitempty" json:"to,omitempty"`
	// Username authenticates an email channel at its SMTP server, with
	// Secret as the password.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
}

// ChannelType says how a Channel is spoken to.
type ChannelType string

// The kinds of channel.
const (
	// ChannelWebhook POSTs the event, signed, to any HTTP endpoint.
	ChannelWebhook ChannelType = "webhook"
	// ChannelSlack posts a message to a Slack incoming webhook.
	ChannelSlack ChannelType = "slack"
	// ChannelNtfy publishes to an ntfy topic (ntfy.sh or self-hosted).
	ChannelNtfy ChannelType = "ntfy"
	// ChannelEmail sends an email by SMTP (email.go).
	ChannelEmail ChannelType = "email"
)

var channelTypes = []ChannelType{ChannelWebhook, ChannelSlack, ChannelNtfy, ChannelEmail}

// Valid reports whether t is one of the kinds of channel.
func (t ChannelType) Valid() bool { return slices.Contains(channelTypes, t) }

// Channels is a scope's notify list. Like Names, it is its own type so that
// an explicit empty list survives Marshal.
type Channels []Channel

// IsZero reports whether the list is unset, for yaml's omitempty and json's omitzero.
func (c Channels) IsZero() bool { return c == nil }

// Rules are a scope's permission rules, each list checked in order.
type Rules struct {
	Deny  []string `yaml:"deny,omitempty" json:"deny,omitempty"`
	Ask   []string `yaml:"ask,omitempty" json:"ask,omitempty"`
	Allow []string `yaml:"allow,omitempty" json:"allow,omitempty"`
}

// Names is a list of tool or user names. It is its own type so that an
// explicit empty list ("readOnlyTools: []", overriding the wider scope with
// nothing) survives Marshal, where a plain slice would be dropped as empty.
type Names []string

// IsZero reports whether the list is unset, for yaml's omitempty and json's omitzero.
func (n Names) IsZero() bool { return n == nil }

// ToolSet is requiresApprovalTools: every tool, or a list (empty is "none").
type ToolSet struct {
	All   bool
	Tools []string
}

// Contains reports whether the set holds tool. Entries may name a whole MCP
// server (mcp__server), as patterns do.
func (t ToolSet) Contains(tool string) bool { return t.All || containsTool(t.Tools, tool) }

// String renders the set as the document would: "all", "none" or the list.
func (t ToolSet) String() string {
	switch {
	case t.All:
		return "all"
	case len(t.Tools) == 0:
		return "none"
	}
	b, _ := json.Marshal(t.Tools)
	return string(b)
}

func (t ToolSet) value() any {
	switch {
	case t.All:
		return "all"
	case len(t.Tools) == 0:
		return "none"
	}
	return t.Tools
}

// MarshalYAML writes "all", "none" or the list.
func (t ToolSet) MarshalYAML() (any, error) { return t.value(), nil }

// UnmarshalYAML reads "all", "none" or a list of tool names.
func (t *ToolSet) UnmarshalYAML(n *yaml.Node) error {
	d := newDecoder()
	d.toolSet(&fieldPath{key: "requiresApprovalTools"}, n, t)
	return errorList(d.errs).err()
}

// MarshalJSON writes "all", "none" or the list.
func (t ToolSet) MarshalJSON() ([]byte, error) { return json.Marshal(t.value()) }

// UnmarshalJSON reads "all", "none" or a list of tool names; JSON being YAML,
// the YAML reader does it.
func (t *ToolSet) UnmarshalJSON(b []byte) error {
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil || n.Kind != yaml.DocumentNode || len(n.Content) != 1 {
		return malformed("requiresApprovalTools: not JSON")
	}
	return t.UnmarshalYAML(n.Content[0])
}

// Mode is a permission mode, as Claude Code names them.
type Mode string

// The permission modes.
const (
	// ModeDefault asks where the policy says to.
	ModeDefault Mode = "default"
	// ModeAcceptEdits also runs EditTools without asking.
	ModeAcceptEdits Mode = "acceptEdits"
	// ModePlan denies every tool that is not read-only: the agent may look
	// but not touch.
	ModePlan Mode = "plan"
	// ModeBypassPermissions runs everything no deny rule stops, without
	// asking and without cost checks.
	ModeBypassPermissions Mode = "bypassPermissions"
)

var modes = []Mode{ModeDefault, ModeAcceptEdits, ModePlan, ModeBypassPermissions}

// Valid reports whether m is one of the four modes.
func (m Mode) Valid() bool { return slices.Contains(modes, m) }

// Parse reads a policy document in YAML, or in JSON (which is YAML), strictly:
// an unknown field, a duplicate key or a value of the wrong type is an
// error, and so is anything Validate refuses. Errors wrap machine.ErrInvalid
// and name the field they are about; when there are several, all are
// returned, joined.
func Parse(data []byte) (*Document, error) {
	doc, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(); err != nil {
		return nil, err
	}
	return doc, nil
}

// Decode reads a policy document as strictly as Parse, but does not
// Validate it: for showing a document rather than putting it in force (a
// redacted one, which Validate refuses, prints as JSON through it).
func Decode(data []byte) (*Document, error) {
	if j, ok := jsonForYAML(data); ok {
		data = j
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	switch err := dec.Decode(&root); {
	case errors.Is(err, io.EOF):
		return &Document{}, nil
	case err != nil:
		return nil, malformed("%v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, malformed("want one YAML document, found more")
	}
	doc := &Document{}
	d := newDecoder()
	d.document(&root, doc)
	if len(d.errs) > 0 {
		return nil, errorList(d.errs).err()
	}
	return doc, nil
}

// Marshal writes d as YAML that Parse reads back to an equal Document.
func Marshal(d *Document) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Validate checks every field of every scope, compiles every rule pattern
// and describe template, checks that every specifier on a tool that is
// not built in reads an argument matchArgument names (see readable.go),
// and returns all that is wrong, joined. Each error is a *FieldError.
func (d *Document) Validate() error {
	c, err := compile(d)
	var errs errorList
	var joined joinedErrors
	switch {
	case errors.As(err, &joined):
		errs = errorList(joined)
	case err != nil:
		errs = errorList{err}
	}
	c.checkReadable(&errs)
	return errs.err()
}

// Resolve merges the default scope, the team's and the conversation's (in
// that order, narrower winning) into the policy that applies to a call, with
// built-in defaults for whatever no scope sets. It assumes d is valid
// (Parse checks): rule patterns and templates that do not compile are left
// out.
func (d *Document) Resolve(team, conversationID string) Resolved {
	c, _ := compile(d)
	return *c.resolve(team, conversationID)
}

// Clone returns a deep copy of d.
func (d *Document) Clone() *Document {
	if d == nil {
		return &Document{}
	}
	c := &Document{}
	if d.Default != nil {
		p := d.Default.clone()
		c.Default = &p
	}
	c.Teams = clonePolicies(d.Teams)
	c.Conversations = clonePolicies(d.Conversations)
	return c
}

func clonePolicies(m map[string]*Policy) map[string]*Policy {
	if m == nil {
		return nil
	}
	c := make(map[string]*Policy, len(m))
	for k, p := range m {
		if p == nil {
			c[k] = nil
			continue
		}
		cp := p.clone()
		c[k] = &cp
	}
	return c
}

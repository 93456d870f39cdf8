package policy

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/machine"
)

// Built-in defaults, for fields no scope sets.
const (
	// DefaultMaxExecutionAttempts is how often a call is claimed before it
	// is left failed.
	DefaultMaxExecutionAttempts = 3
	// BuiltIn is the scope Resolved.Sources names for a built-in default.
	BuiltIn = "built-in"
)

// defaultReadOnlyTools are Claude Code's tools that only look.
var defaultReadOnlyTools = []string{"Read", "Glob", "Grep", "LS", "NotebookRead"}

// defaultEditTools are Claude Code's tools that edit files.
var defaultEditTools = []string{"Write", "Edit", "MultiEdit", "NotebookEdit"}

// DefaultApprovalReminderPercent is how far into its approval timeout a
// pending call is notified again when the policy does not say.
const DefaultApprovalReminderPercent = 80

// maxMs bounds delays and timeouts: a year, far below where milliseconds
// overflow a time.Duration.
const maxMs = 365 * 24 * 60 * 60 * 1000

// currencyCode is an ISO 4217 code's shape.
var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// Resolved is the policy in force for one team and conversation: every
// field filled, from the narrowest scope that sets it or a built-in default.
// Its lists may be shared with the Engine that resolved it: read, don't write.
type Resolved struct {
	RequiresApprovalTools    ToolSet
	DefaultDelay             time.Duration
	ToolSpecificDelays       map[string]time.Duration
	ApprovalTimeout          time.Duration
	AutoRejectOnTimeout      bool
	ApprovalReminderPercent  int // of ApprovalTimeout; 0: no reminder
	ReadOnlyTools            []string
	EditTools                []string
	Rules                    RuleSet
	Describe                 map[string]string   // tool → template source
	MatchArgument            map[string]string   // tool or MCP server → the argument specifiers read (see ArgumentOf)
	Editable                 map[string]bool     // tool → may an approver edit its calls; absent: yes
	Risks                    map[string]RiskRule // pattern → the risk of the calls it matches
	RateLimits               []RateRule          // every scope's rate rules, the narrowest scope's first
	Redact                   []string            // every scope's redact patterns
	Reveal                   []string            // the roles that may reveal a call's arguments (Policy.Reveal)
	RequireApprovalAboveCost *float64            // nil: no threshold
	DailyCostLimit           *float64            // nil: no limit
	Approvers                []string
	UserIDToApprove          string
	Quorums                  map[string]compiledQuorum // pattern → the quorum of the calls it matches
	Escalate                 Tiers
	MaxExecutionAttempts     int
	PermissionMode           Mode
	// DisableBypassPermissionsMode makes a call's bypassPermissions count as default.
	DisableBypassPermissionsMode bool
	// Notify are the channels told of the call's approval (none by default).
	Notify []Channel
	// InboxURL is the base of the links in notifications; "" for none.
	InboxURL string
	// Currency is the code costs are counted in; "" when none is named.
	Currency string
	// Flows are every scope's flows, the narrowest scope's first.
	Flows []FlowRule
	// OnTimeout is, by pattern, what the timer does with the asked calls
	// it matches at their deadline; Respondable, the patterns whose asked
	// calls an approver may answer with a result (decisions.go).
	OnTimeout   map[string]TimeoutRule
	Respondable []Pattern
	// NoGrants are the patterns whose calls get no grant; NoGrantsAtRisk
	// the risk from which no call does ("": none).
	NoGrants       []Pattern
	NoGrantsAtRisk machine.Risk
	// Idempotent are the patterns whose calls may run twice (idempotent.go).
	Idempotent []Pattern
	// Reviewers are the automated reviewers of asked calls (none by
	// default), from the narrowest scope that names any.
	Reviewers []CompiledReviewer

	// Sources names the scope each value came from ("default",
	// "teams.finance", "conversations.c1", or BuiltIn), keyed by the field's
	// name in the document, and for per-tool maps by name and key:
	// `toolSpecificDelays["slow_report"]`. Verdict reasons quote it.
	Sources map[string]string

	templates map[string]*template.Template
}

// RuleSet holds the rules of every scope that applies, by kind, each list in
// the order it is checked: the narrowest scope's rules first, then the
// wider ones', each scope's in the order written.
type RuleSet struct {
	Deny, Ask, Allow []Rule
}

// Rule is one permission rule and where it came from.
type Rule struct {
	Kind    string // "deny", "ask" or "allow"
	Pattern Pattern
	Scope   string
	Index   int // its place in its scope's list of its kind, from 0
}

// String names the rule as verdict reasons do: rules.deny "Bash(rm -rf *)" (default).
func (r Rule) String() string {
	return fmt.Sprintf("rules.%s %q (%s)", r.Kind, r.Pattern.String(), r.Scope)
}

// ArgumentOf is the argument a specifier on tool reads, as matchArgument
// names it: the tool's own key, else its MCP server's (mcp__server, or
// mcp__server__*); "" when neither is set. Built-in tools read their own
// argument whatever this says.
func (r *Resolved) ArgumentOf(tool string) string {
	if arg := r.MatchArgument[tool]; arg != "" {
		return arg
	}
	if srv, ok := mcpToolServer(tool); ok {
		return cmp.Or(r.MatchArgument[srv], r.MatchArgument[srv+"__*"])
	}
	return ""
}

// ReadOnly reports whether tool is one of ReadOnlyTools.
func (r *Resolved) ReadOnly(tool string) bool { return containsTool(r.ReadOnlyTools, tool) }

// EditTool reports whether tool is one of EditTools.
func (r *Resolved) EditTool(tool string) bool { return containsTool(r.EditTools, tool) }

// Delay is how long tool waits before running when nobody approved it, and
// the field (with its scope) that says so.
func (r *Resolved) Delay(tool string) (time.Duration, string) {
	if d, ok := r.ToolSpecificDelays[tool]; ok {
		f := index("toolSpecificDelays", tool)
		return d, fmt.Sprintf("%s %dms (%s)", f, d.Milliseconds(), r.Sources[f])
	}
	return r.DefaultDelay, fmt.Sprintf("defaultDelayMs %d (%s)", r.DefaultDelay.Milliseconds(), r.Sources["defaultDelayMs"])
}

// Description says in one line what a call of tool with args does: the
// tool's describe template rendered over args, or when there is none or it
// fails, the tool's name and its arguments (raw, as sent) in compact JSON.
func (r *Resolved) Description(tool string, args map[string]any, raw []byte) string {
	if t := r.templates[tool]; t != nil {
		if s, ok := render(t, args); ok {
			return s
		}
	}
	return defaultDescription(tool, raw)
}

// layer is one scope of a document, checked and compiled.
type layer struct {
	scope     string
	p         Policy // a deep copy: the caller may change the Document later
	rules     RuleSet
	risks     map[string]RiskRule
	quorums   map[string]compiledQuorum
	timeouts  map[string]TimeoutRule // onTimeout, compiled
	respond   []Pattern              // respondable, compiled
	noGrants  []Pattern              // noGrants, compiled
	idem      []Pattern              // idempotent, compiled
	rates     []RateRule
	flows     []FlowRule
	templates map[string]*template.Template
	reviewers []CompiledReviewer
}

// compiled is a document ready to resolve.
type compiled struct {
	def   *layer
	teams map[string]*layer
	convs map[string]*layer
}

// compile checks d and compiles its patterns and templates. It returns what
// it could compile even when it also returns errors.
func compile(d *Document) (*compiled, error) {
	c := &compiled{teams: map[string]*layer{}, convs: map[string]*layer{}}
	var errs errorList
	if d == nil {
		d = &Document{}
	}
	c.def = compileLayer(&errs, "default", d.Default)
	for _, name := range slices.Sorted(maps.Keys(d.Teams)) {
		scope := child("teams", name)
		checkName(&errs, scope, "team name", name)
		c.teams[name] = compileLayer(&errs, scope, d.Teams[name])
	}
	for _, id := range slices.Sorted(maps.Keys(d.Conversations)) {
		scope := child("conversations", id)
		checkName(&errs, scope, "conversation id", id)
		c.convs[id] = compileLayer(&errs, scope, d.Conversations[id])
	}
	checkTimeoutApprovals(&errs, c)
	return c, errs.err()
}

func checkName(errs *errorList, path, what, name string) {
	if name == "" || len(name) > 256 {
		errs.add(path, "%s must be 1 to 256 bytes, got %d", what, len(name))
	}
}

func compileLayer(errs *errorList, scope string, src *Policy) *layer {
	l := &layer{scope: scope, templates: map[string]*template.Template{}}
	if src == nil {
		return l
	}
	l.p = src.clone()
	p := &l.p
	at := func(field string) string { return scope + "." + field }

	if p.RequiresApprovalTools != nil {
		checkTools(errs, at("requiresApprovalTools"), p.RequiresApprovalTools.Tools)
	}
	checkMs(errs, at("approvalTimeoutMs"), p.ApprovalTimeoutMs, 1)
	if v := p.ApprovalReminderPercent; v != nil && (*v < 0 || *v > 99) {
		errs.add(at("approvalReminderPercent"), "must be 0 (no reminder) to 99, got %d", *v)
	}
	checkMs(errs, at("defaultDelayMs"), p.DefaultDelayMs, 0)
	for _, tool := range slices.Sorted(maps.Keys(p.ToolSpecificDelays)) {
		f := index(at("toolSpecificDelays"), tool)
		checkToolName(errs, f, tool)
		ms := p.ToolSpecificDelays[tool]
		checkMs(errs, f, &ms, 0)
	}
	checkTools(errs, at("readOnlyTools"), p.ReadOnlyTools)
	checkTools(errs, at("editTools"), p.EditTools)
	for _, kind := range []struct {
		name string
		src  []string
		dst  *[]Rule
	}{{"deny", p.Rules.Deny, &l.rules.Deny}, {"ask", p.Rules.Ask, &l.rules.Ask}, {"allow", p.Rules.Allow, &l.rules.Allow}} {
		for i, s := range kind.src {
			pat, err := parsePattern(s)
			if err != nil {
				errs.add(fmt.Sprintf("%s[%d]", at("rules."+kind.name), i), "%q: %v", s, err)
				continue
			}
			*kind.dst = append(*kind.dst, Rule{Kind: kind.name, Pattern: pat, Scope: scope, Index: i})
		}
	}
	for _, tool := range slices.Sorted(maps.Keys(p.Describe)) {
		f := index(at("describe"), tool)
		checkToolName(errs, f, tool)
		t, err := parseTemplate(tool, p.Describe[tool])
		if err != nil {
			errs.add(f, "%v", err)
			continue
		}
		l.templates[tool] = t
	}
	for _, tool := range slices.Sorted(maps.Keys(p.MatchArgument)) {
		f := index(at("matchArgument"), tool)
		if !validToolEntry(tool) {
			errs.add(f, "must be a tool name or an MCP server (mcp__server), got %q", tool)
		} else if args, ok := builtinArgs[tool]; ok {
			errs.add(f, "%s is matched against its %s argument; that cannot be changed", tool, args[0])
		} else if p.MatchArgument[tool] == "" {
			errs.add(f, "argument name is empty")
		}
	}
	for i, pat := range p.Redact {
		if _, err := path.Match(pat, ""); err != nil || pat == "" || pat == "$" {
			errs.add(fmt.Sprintf("%s[%d]", at("redact"), i), "%q: want a path ($.headers.Authorization) or a key name (*token*), globs allowed", pat)
		}
	}
	for i, role := range p.Reveal {
		if !slices.Contains(revealRoles, role) {
			errs.add(fmt.Sprintf("%s[%d]", at("reveal"), i), "must be admin, approver or viewer, got %q", role)
		}
	}
	for _, tool := range slices.Sorted(maps.Keys(p.Editable)) {
		checkToolName(errs, index(at("editable"), tool), tool)
	}
	l.risks = compileRisk(errs, scope, p.Risk)
	l.rates = compileRateLimits(errs, scope, p.RateLimits)
	l.flows = compileFlows(errs, scope, p.Flows)
	checkCost(errs, at("requireApprovalAboveCost"), p.RequireApprovalAboveCost)
	checkCost(errs, at("dailyCostLimit"), p.DailyCostLimit)
	checkPeople(errs, at("approvers"), p.Approvers)
	if u := p.UserIDToApprove; u != nil {
		switch {
		case !checkOnePerson(errs, at("userIdToApprove"), *u, "list a group in approvers instead"):
		case len(p.Approvers) > 0 && !slices.Contains(p.Approvers, *u):
			// machine.Decide wants both, so nobody could decide.
			errs.add(at("userIdToApprove"), "%q is not among this scope's approvers %q", *u, []string(p.Approvers))
		}
	}
	l.quorums = compileQuorum(errs, scope, p)
	l.timeouts, l.respond = compileDecisions(errs, scope, p)
	l.noGrants = compileNoGrants(errs, scope, p)
	l.idem = compilePatterns(errs, scope, "idempotent", p.Idempotent)
	checkTiers(errs, at("escalate"), p.Escalate)
	if n := p.MaxExecutionAttempts; n != nil && (*n < 1 || *n > 100) {
		errs.add(at("maxExecutionAttempts"), "must be 1 to 100, got %d", *n)
	}
	if m := p.PermissionMode; m != nil && !m.Valid() {
		errs.add(at("permissionMode"), "must be default, acceptEdits, plan or bypassPermissions, got %q", string(*m))
	}
	checkChannels(errs, at("notify"), p.Notify)
	if c := p.Currency; c != nil && !currencyCode.MatchString(*c) {
		errs.add(at("currency"), "want an ISO 4217 code of three capital letters (EUR, USD), got %q", *c)
	}
	if u := p.InboxURL; u != nil {
		if msg := checkHTTPURL(*u); msg != "" {
			errs.add(at("inboxUrl"), "%s", msg)
		} else if strings.Contains(*u, "?") {
			errs.add(at("inboxUrl"), "must not have a query: links append #/calls/<pendingId> to it")
		}
	}
	l.reviewers = compileReviewers(errs, scope, p.Reviewers)
	return l
}

// maxChannels bounds a scope's notify list: every call that asks is
// delivered to each, and each is a consumer on the bus.
const maxChannels = 16

// ntfyTopicRE is what ntfy accepts as a topic name.
var ntfyTopicRE = regexp.MustCompile(`^[-_A-Za-z0-9]{1,64}$`)

func checkChannels(errs *errorList, path string, chans Channels) {
	if len(chans) > maxChannels {
		errs.add(path, "at most %d channels, got %d", maxChannels, len(chans))
	}
	type where struct {
		t          ChannelType
		url, topic string
	}
	seen := map[where]int{}
	for i, c := range chans {
		at := func(field string) string { return fmt.Sprintf("%s[%d].%s", path, i, field) }
		if !c.Type.Valid() {
			errs.add(at("type"), "must be webhook, slack, ntfy or email, got %q", string(c.Type))
		}
		switch {
		case c.URL == RedactedValue:
			errs.add(at("url"), "%s", redactedMsg)
		case IsSecretRef(c.URL):
			if msg := checkSecretRef(c.URL); msg != "" {
				errs.add(at("url"), "%s", msg)
			}
		case c.Type == ChannelEmail: // checkEmail
		default:
			if msg := checkHTTPURL(c.URL); msg != "" {
				errs.add(at("url"), "%s", msg)
			}
		}
		switch {
		case c.Type == ChannelNtfy && c.Topic == "":
			errs.add(at("topic"), "required for an ntfy channel")
		case c.Type == ChannelNtfy && !ntfyTopicRE.MatchString(c.Topic):
			errs.add(at("topic"), "must be 1 to 64 letters, digits, '-' or '_', got %q", c.Topic)
		case c.Type != ChannelNtfy && c.Topic != "" && c.Type.Valid():
			errs.add(at("topic"), "only ntfy channels have a topic")
		}
		switch {
		case c.Type == ChannelWebhook && c.Secret == "" && len(c.Secrets) == 0:
			errs.add(at("secret"), "required for a webhook (or secrets, a list): deliveries are signed with it (webhook-signature)")
		case c.Type == ChannelSlack && c.Secret != "":
			errs.add(at("secret"), "a Slack incoming webhook takes no secret: its url is the secret")
		case c.Secret == RedactedValue:
			errs.add(at("secret"), "%s", redactedMsg)
		case IsSecretRef(c.Secret):
			if msg := checkSecretRef(c.Secret); msg != "" {
				errs.add(at("secret"), "%s", msg)
			}
		case len(c.Secret) > maxSecretLen:
			errs.add(at("secret"), "at most %d bytes, got %d", maxSecretLen, len(c.Secret))
		}
		checkWebhook(errs, at, c)
		checkEmail(errs, at, c)
		checkDeciders(errs, at, c)
		// An email channel is its server and its recipients.
		key := where{c.Type, c.URL, c.Topic + "\x00" + strings.Join(c.To, ",")}
		if j, ok := seen[key]; ok {
			errs.add(fmt.Sprintf("%s[%d]", path, i), "the same channel as %s[%d]", path, j)
		} else {
			seen[key] = i
		}
	}
}

// redactedMsg refuses a document read redacted and set again: storing it
// would replace the secret with the placeholder, and guessing which stored
// secret the placeholder stands for (by position? by URL, when the URL is
// the secret?) could put one channel's secret on another.
const redactedMsg = "is " + `"` + RedactedValue + `"` + ", the placeholder `policy get` shows for a secret, not a secret: " +
	"give the secret (`policy get --show-secrets`, as an admin, shows it) or a reference to it (env:NAME, file:PATH)"

// checkHTTPURL says what is wrong with u as an absolute http(s) URL, or
// "" when nothing is. It does not quote u: a Slack webhook's URL is a
// secret, and errors end up in logs.
func checkHTTPURL(u string) string {
	if u == "" {
		return "required: an absolute http or https URL"
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return "not a URL"
	case p.Scheme != "http" && p.Scheme != "https":
		return fmt.Sprintf("must be an absolute http or https URL, got scheme %q", p.Scheme)
	case p.Host == "" || p.Opaque != "":
		return "must be an absolute http or https URL with a host"
	case p.Fragment != "" || strings.HasSuffix(u, "#"):
		return "must not have a fragment (#…)"
	}
	return ""
}

func checkMs(errs *errorList, path string, v *int64, least int64) {
	switch {
	case v == nil:
	case *v < least:
		errs.add(path, "must be >= %d, got %d", least, *v)
	case *v > maxMs:
		errs.add(path, "must be at most a year (%d), got %d", int64(maxMs), *v)
	}
}

func checkCost(errs *errorList, path string, v *float64) {
	switch {
	case v == nil:
	case math.IsNaN(*v) || math.IsInf(*v, 0):
		errs.add(path, "must be a finite number, got %v", *v)
	case *v < 0:
		errs.add(path, "must be >= 0, got %v", *v)
	}
}

func checkToolName(errs *errorList, path, tool string) {
	if !toolNameRE.MatchString(tool) {
		errs.add(path, "tool name must be 1 to 128 letters, digits, '_' or '-', got %q", tool)
	}
}

func checkTools(errs *errorList, path string, tools []string) {
	for i, t := range tools {
		if !validToolEntry(t) {
			errs.add(fmt.Sprintf("%s[%d]", path, i), "must be a tool name or an MCP server (mcp__server), got %q", t)
		}
	}
}

// clone copies p deeply enough that changing the original's lists and
// maps afterwards does not reach the copy.
func (p *Policy) clone() Policy {
	c := *p
	if p.RequiresApprovalTools != nil {
		ts := *p.RequiresApprovalTools
		ts.Tools = slices.Clone(ts.Tools)
		c.RequiresApprovalTools = &ts
	}
	c.ApprovalTimeoutMs = clonePtr(p.ApprovalTimeoutMs)
	c.AutoRejectOnTimeout = clonePtr(p.AutoRejectOnTimeout)
	c.ApprovalReminderPercent = clonePtr(p.ApprovalReminderPercent)
	c.DefaultDelayMs = clonePtr(p.DefaultDelayMs)
	c.ToolSpecificDelays = maps.Clone(p.ToolSpecificDelays)
	c.ReadOnlyTools = slices.Clone(p.ReadOnlyTools)
	c.EditTools = slices.Clone(p.EditTools)
	c.Rules = Rules{Deny: slices.Clone(p.Rules.Deny), Ask: slices.Clone(p.Rules.Ask), Allow: slices.Clone(p.Rules.Allow)}
	c.Describe = maps.Clone(p.Describe)
	c.MatchArgument = maps.Clone(p.MatchArgument)
	c.Editable = maps.Clone(p.Editable)
	c.Risk = maps.Clone(p.Risk)
	c.RateLimits = slices.Clone(p.RateLimits)
	c.Redact = slices.Clone(p.Redact)
	c.Reveal = slices.Clone(p.Reveal)
	c.RequireApprovalAboveCost = clonePtr(p.RequireApprovalAboveCost)
	c.DailyCostLimit = clonePtr(p.DailyCostLimit)
	c.Approvers = slices.Clone(p.Approvers)
	c.UserIDToApprove = clonePtr(p.UserIDToApprove)
	c.Quorum = maps.Clone(p.Quorum)
	for k, q := range c.Quorum {
		q.Of = slices.Clone(q.Of)
		c.Quorum[k] = q
	}
	c.Escalate = slices.Clone(p.Escalate)
	for i := range c.Escalate {
		c.Escalate[i].To = slices.Clone(c.Escalate[i].To)
	}
	c.MaxExecutionAttempts = clonePtr(p.MaxExecutionAttempts)
	c.PermissionMode = clonePtr(p.PermissionMode)
	c.DisableBypassPermissionsMode = clonePtr(p.DisableBypassPermissionsMode)
	c.Notify = slices.Clone(p.Notify)
	for i := range c.Notify {
		c.Notify[i].Secrets = slices.Clone(c.Notify[i].Secrets)
		c.Notify[i].SlackUsers = maps.Clone(c.Notify[i].SlackUsers)
		c.Notify[i].To = slices.Clone(c.Notify[i].To)
	}
	c.InboxURL = clonePtr(p.InboxURL)
	c.Currency = clonePtr(p.Currency)
	c.Flows = slices.Clone(p.Flows)
	for i := range c.Flows {
		c.Flows[i].Unless = slices.Clone(c.Flows[i].Unless)
	}
	c.OnTimeout = maps.Clone(p.OnTimeout)
	c.Respondable = slices.Clone(p.Respondable)
	c.NoGrants = slices.Clone(p.NoGrants)
	c.Idempotent = slices.Clone(p.Idempotent)
	c.NoGrantsAtRisk = clonePtr(p.NoGrantsAtRisk)
	c.Reviewers = cloneReviewers(p.Reviewers)
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// layers returns the scopes that apply to a call of team and
// conversationID, widest first.
func (c *compiled) layers(team, conversationID string) []*layer {
	layers := []*layer{c.def}
	if l := c.teams[team]; l != nil && team != "" {
		layers = append(layers, l)
	}
	if l := c.convs[conversationID]; l != nil && conversationID != "" {
		layers = append(layers, l)
	}
	return layers
}

// masker is Resolved's masking (Redact and Reveal) without the rest of
// resolve, which the relay would otherwise build for every revision it
// masks.
func (c *compiled) masker(team, conversationID string) Masker {
	var m Masker
	for _, l := range c.layers(team, conversationID) {
		m.patterns = append(m.patterns, l.p.Redact...)
		if l.p.Reveal != nil {
			m.reveal = l.p.Reveal
		}
	}
	return m
}

// resolve merges the scopes that apply, widest first so narrower ones
// overwrite, except rules, which add up narrowest first.
func (c *compiled) resolve(team, conversationID string) *Resolved {
	r := &Resolved{
		RequiresApprovalTools:   ToolSet{All: true},
		Reveal:                  DefaultReveal,
		ToolSpecificDelays:      map[string]time.Duration{},
		ApprovalTimeout:         machine.DefaultApprovalTimeout,
		AutoRejectOnTimeout:     true,
		ApprovalReminderPercent: DefaultApprovalReminderPercent,
		ReadOnlyTools:           slices.Clone(defaultReadOnlyTools),
		EditTools:               slices.Clone(defaultEditTools),
		Describe:                map[string]string{},
		MatchArgument:           map[string]string{},
		Editable:                map[string]bool{},
		Risks:                   map[string]RiskRule{},
		Quorums:                 map[string]compiledQuorum{},
		OnTimeout:               map[string]TimeoutRule{},
		NoGrantsAtRisk:          machine.RiskHigh,
		MaxExecutionAttempts:    DefaultMaxExecutionAttempts,
		PermissionMode:          ModeDefault,
		Sources:                 map[string]string{},
		templates:               map[string]*template.Template{},
	}
	for _, f := range []string{"requiresApprovalTools", "defaultDelayMs", "approvalTimeoutMs", "autoRejectOnTimeout", "approvalReminderPercent",
		"readOnlyTools", "editTools", "maxExecutionAttempts", "permissionMode", "disableBypassPermissionsMode",
		"notify", "inboxUrl", "reviewers", "noGrantsAtRisk"} {
		r.Sources[f] = BuiltIn
	}
	layers := c.layers(team, conversationID)
	for _, l := range layers {
		r.merge(l)
	}
	for i := len(layers) - 1; i >= 0; i-- {
		r.Rules.Deny = append(r.Rules.Deny, layers[i].rules.Deny...)
		r.Rules.Ask = append(r.Rules.Ask, layers[i].rules.Ask...)
		r.Rules.Allow = append(r.Rules.Allow, layers[i].rules.Allow...)
	}
	return r
}

func (r *Resolved) merge(l *layer) {
	p, s := &l.p, l.scope
	set := func(field string, ok bool, apply func()) {
		if ok {
			apply()
			r.Sources[field] = s
		}
	}
	set("requiresApprovalTools", p.RequiresApprovalTools != nil, func() { r.RequiresApprovalTools = *p.RequiresApprovalTools })
	set("defaultDelayMs", p.DefaultDelayMs != nil, func() { r.DefaultDelay = ms(*p.DefaultDelayMs) })
	set("approvalTimeoutMs", p.ApprovalTimeoutMs != nil, func() { r.ApprovalTimeout = ms(*p.ApprovalTimeoutMs) })
	set("autoRejectOnTimeout", p.AutoRejectOnTimeout != nil, func() { r.AutoRejectOnTimeout = *p.AutoRejectOnTimeout })
	set("approvalReminderPercent", p.ApprovalReminderPercent != nil, func() { r.ApprovalReminderPercent = *p.ApprovalReminderPercent })
	set("readOnlyTools", p.ReadOnlyTools != nil, func() { r.ReadOnlyTools = p.ReadOnlyTools })
	set("editTools", p.EditTools != nil, func() { r.EditTools = p.EditTools })
	set("requireApprovalAboveCost", p.RequireApprovalAboveCost != nil, func() { r.RequireApprovalAboveCost = p.RequireApprovalAboveCost })
	set("dailyCostLimit", p.DailyCostLimit != nil, func() { r.DailyCostLimit = p.DailyCostLimit })
	set("approvers", p.Approvers != nil, func() { r.Approvers = p.Approvers })
	set("reveal", p.Reveal != nil, func() { r.Reveal = p.Reveal })
	set("userIdToApprove", p.UserIDToApprove != nil, func() { r.UserIDToApprove = *p.UserIDToApprove })
	set("escalate", p.Escalate != nil, func() { r.Escalate = p.Escalate })
	set("maxExecutionAttempts", p.MaxExecutionAttempts != nil, func() { r.MaxExecutionAttempts = *p.MaxExecutionAttempts })
	set("permissionMode", p.PermissionMode != nil, func() { r.PermissionMode = *p.PermissionMode })
	set("disableBypassPermissionsMode", p.DisableBypassPermissionsMode != nil, func() {
		r.DisableBypassPermissionsMode = *p.DisableBypassPermissionsMode
	})
	set("notify", p.Notify != nil, func() { r.Notify = p.Notify })
	set("inboxUrl", p.InboxURL != nil, func() { r.InboxURL = *p.InboxURL })
	set("currency", p.Currency != nil, func() { r.Currency = *p.Currency })
	set("reviewers", p.Reviewers != nil, func() { r.Reviewers = l.reviewers })
	for tool, v := range p.ToolSpecificDelays {
		r.ToolSpecificDelays[tool] = ms(v)
		r.Sources[index("toolSpecificDelays", tool)] = s
	}
	for tool, src := range p.Describe {
		r.Describe[tool] = src
		r.templates[tool] = l.templates[tool] // nil when it did not compile
		r.Sources[index("describe", tool)] = s
	}
	for tool, arg := range p.MatchArgument {
		r.MatchArgument[tool] = arg
		r.Sources[index("matchArgument", tool)] = s
	}
	r.Redact = append(r.Redact, p.Redact...)
	r.RateLimits = append(slices.Clone(l.rates), r.RateLimits...) // narrowest first
	r.Flows = append(slices.Clone(l.flows), r.Flows...)           // narrowest first
	for tool, ok := range p.Editable {
		r.Editable[tool] = ok
		r.Sources[index("editable", tool)] = s
	}
	for key, rr := range l.risks {
		r.Risks[key] = rr
		r.Sources[index("risk", key)] = s
	}
	for key, q := range l.quorums {
		r.Quorums[key] = q
		r.Sources[index("quorum", key)] = s
	}
	for key, tr := range l.timeouts {
		r.OnTimeout[key] = tr
		r.Sources[index("onTimeout", key)] = s
	}
	set("respondable", p.Respondable != nil, func() { r.Respondable = l.respond })
	set("noGrants", p.NoGrants != nil, func() { r.NoGrants = l.noGrants })
	set("idempotent", p.Idempotent != nil, func() { r.Idempotent = l.idem })
	set("noGrantsAtRisk", p.NoGrantsAtRisk != nil, func() { r.NoGrantsAtRisk = noGrantsRisk(*p.NoGrantsAtRisk) })
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// formatNumber prints a cost as the document would: 100, 0.5.
func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// checkPeople checks a list of people at path (approvers, a quorum's
// members, an escalation tier's): each a toolgate user id or a group
// (group:NAME), none twice. It reports whether all are good.
func checkPeople(errs *errorList, path string, people []string) bool {
	ok := true
	seen := map[string]bool{}
	for i, u := range people {
		f := fmt.Sprintf("%s[%d]", path, i)
		if msg := personProblem(u); msg != "" {
			errs.add(f, "%s", msg)
			ok = false
		} else if seen[u] {
			errs.add(f, "%q is listed twice", u)
			ok = false
		}
		seen[u] = true
	}
	return ok
}

// maxGroupName bounds NAME in group:NAME, as toolgate bounds each group's
// name in a provider's claim.
const maxGroupName = 256

// personProblem says what is wrong with an entry of a list of people,
// "" when nothing is: a user id is 1 to 256 bytes; group:NAME names a
// group of 1 to 256 bytes of printable characters, without a space at
// either end, as the provider spells it (payments-leads, /acme/sre, an
// Entra ID object ID).
func personProblem(u string) string {
	g, isGroup := machine.GroupOf(u)
	switch {
	case !isGroup && (u == "" || len(u) > 256):
		return fmt.Sprintf("user id must be 1 to 256 bytes, got %q", u)
	case !isGroup:
		return ""
	case g == "" || len(g) > maxGroupName:
		return fmt.Sprintf("%s needs a group's name of 1 to %d bytes, got %d in %q", machine.GroupPrefix, maxGroupName, len(g), u)
	case !utf8.ValidString(g) || strings.ContainsFunc(g, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }):
		return fmt.Sprintf("%q: a group's name is printable characters only", u)
	case strings.TrimSpace(g) != g:
		return fmt.Sprintf("%q: a group's name has no space at either end", u)
	}
	return ""
}

// checkOnePerson checks a field that names one user, never a group (the
// user a channel's links decide as, userIdToApprove).
func checkOnePerson(errs *errorList, path, u, why string) bool {
	if _, isGroup := machine.GroupOf(u); isGroup {
		errs.add(path, "%q: names one user, not a group: %s", u, why)
		return false
	}
	if msg := personProblem(u); msg != "" {
		errs.add(path, "%s", msg)
		return false
	}
	return true
}

// revealRoles are the roles Policy.Reveal may name: those shown a call's
// arguments masked (an agent and an executor get them as they are).
var revealRoles = []string{"admin", "approver", "viewer"}

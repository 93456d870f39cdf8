package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/machine"
)

// A scope's flows are rules over sequences of calls: a call that follows
// another in the same conversation (or of the same caller) within a
// window is asked about or denied, whatever else would let it run:
//
//	flows:
//	  - after: mcp__mail__read_inbox
//	    then: mcp__mail__send_email
//	    unless: ["mcp__mail__send_email(*@example.com)"]
//	    within: 1h
//	    scope: conversation
//	    action: ask
//	    reason: mail read from the inbox may leave the company
//
// When a call that after matches completes (COMPLETED_SUCCESS), the gate
// marks it, per flow and conversation or caller (FlowMarks: bus keeps
// them in KV, changed by compare-and-set, shared by every replica). A
// later call that then matches, and no unless pattern exempts, is given
// the flow's action if a marked call completed within the window before
// it; the reason names the flow and the earlier call. A mark that cannot
// be read asks. Like the rate rules, the scopes' lists add up, the
// narrowest scope's first, and the first flow that applies decides.

// Flow is one entry of a scope's flows, as written.
type Flow struct {
	// After is a pattern in rule syntax: the calls whose completion starts
	// the window. A specifier that cannot read a call's argument matches,
	// as a deny or ask rule's does.
	After string `yaml:"after" json:"after"`
	// Then is a pattern in rule syntax: the calls the window holds back,
	// matched as a deny or ask rule is.
	Then string `yaml:"then" json:"then"`
	// Unless lists patterns in rule syntax that exempt a call Then
	// matches, each matched as an allow rule is (every command of a Bash
	// line, never an argument it cannot read): a recipient inside the
	// company, a fetch of a known host.
	Unless []string `yaml:"unless,omitempty" json:"unless,omitempty"`
	// Within is the window after the After call completed: a duration
	// such as 30s, 10m or 1h (1s to 24h).
	Within string `yaml:"within" json:"within"`
	// Scope is where the two calls must both be: conversation (the
	// default) or caller (the same agent, in any conversation).
	Scope FlowScope `yaml:"scope,omitempty" json:"scope,omitempty"`
	// Action is what the Then call gets: ask (the default) or deny.
	Action machine.Action `yaml:"action,omitempty" json:"action,omitempty"`
	// Reason is said to approvers and the agent, after the flow's name
	// and the earlier call's (at most MaxFlowReason bytes).
	Reason string `yaml:"reason,omitempty" json:"reason,omitempty"`
}

// FlowScope is where a flow's two calls must both be.
type FlowScope string

// The flow scopes.
const (
	FlowByConversation FlowScope = "conversation" // the same conversation (the default)
	FlowByCaller       FlowScope = "caller"       // the same caller (agent), in any conversation
)

// Bounds of a flow.
const (
	// MinFlowWithin and MaxFlowWithin bound within. Marks live in a
	// bucket whose values expire a while after MaxFlowWithin.
	MinFlowWithin = time.Second
	MaxFlowWithin = 24 * time.Hour
	// MaxFlowReason bounds a flow's reason, in bytes.
	MaxFlowReason = 512
	// maxFlows bounds a scope's list: each flow whose after matches a
	// completed call is a write on the bus.
	maxFlows = 64
	// maxUnless bounds a flow's unless list.
	maxUnless = 32
)

// FlowRule is a flow compiled, as Resolved holds it.
type FlowRule struct {
	Index  int // in its scope's list
	After  Pattern
	Then   Pattern
	Unless []Pattern
	Within time.Duration
	// WithinText is within as written ("1h").
	WithinText string
	Scope      FlowScope
	Action     machine.Action
	Reason     string
	// Source is the scope of the document the flow is in (default,
	// teams.ops, conversations.c1).
	Source string
	// MarkID names the marks the flow reads: a digest of its source,
	// after and scope, so that flows of one scope with the same after
	// share their marks, and changing then, unless, within, action or
	// reason keeps them.
	MarkID string
}

// String names the flow as verdict reasons do: flows[0] "mcp__mail__read_inbox" → "mcp__mail__send_email" (default).
func (f FlowRule) String() string {
	return fmt.Sprintf("flows[%d] %q → %q (%s)", f.Index, f.After.String(), f.Then.String(), f.Source)
}

// FlowKey names one mark: a flow's (its MarkID), for one conversation or
// caller.
type FlowKey struct {
	Mark  string // FlowRule.MarkID
	Scope FlowScope
	Value string // the conversation id or the caller
}

// Who says whose calls the mark is about: "conversation c1", "caller bot-1".
func (k FlowKey) Who() string {
	v := k.Value
	if v == "" {
		v = `""`
	}
	return string(k.Scope) + " " + v
}

// Key is the mark of this flow that c is in.
func (f FlowRule) Key(c machine.Call) FlowKey {
	k := FlowKey{Mark: f.MarkID, Scope: f.Scope, Value: c.ConversationID}
	if f.Scope == FlowByCaller {
		k.Value = c.CallerBotID
	}
	return k
}

// FlowMark is the latest call a flow's after matched that completed, in
// one conversation or of one caller.
type FlowMark struct {
	ToolName  string
	PendingID string
	// At is when it completed, as the gate that marked it tells time.
	At time.Time
}

// FlowMarks keeps the marks of the flows. bus implements it on NATS KV;
// MemoryFlowMarks in memory, for replaying history.
type FlowMarks interface {
	// Mark records m under key unless the mark there completed later; it
	// must be atomic: of two marks racing, the later stays.
	Mark(ctx context.Context, key FlowKey, m FlowMark) error
	// Last returns the mark under key; ok is false when there is none.
	Last(ctx context.Context, key FlowKey) (m FlowMark, ok bool, err error)
}

// WithFlowMarks gives an Engine the marks of its flows. Without them, a
// call a flow's then matches is asked about, since nothing can say
// whether its after call came first.
func WithFlowMarks(m FlowMarks) EngineOption { return func(e *Engine) { e.flows = m } }

// MemoryFlowMarks is FlowMarks in memory: what a replay of recorded calls
// marks as it goes. The zero value is ready to use.
type MemoryFlowMarks struct {
	mu    sync.Mutex
	marks map[FlowKey]FlowMark
}

var _ FlowMarks = (*MemoryFlowMarks)(nil)

// Mark implements FlowMarks.
func (m *MemoryFlowMarks) Mark(_ context.Context, key FlowKey, mark FlowMark) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marks == nil {
		m.marks = map[FlowKey]FlowMark{}
	}
	if cur, ok := m.marks[key]; !ok || !cur.At.After(mark.At) {
		m.marks[key] = mark
	}
	return nil
}

// Last implements FlowMarks.
func (m *MemoryFlowMarks) Last(_ context.Context, key FlowKey) (FlowMark, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mark, ok := m.marks[key]
	return mark, ok, nil
}

// compileFlows checks a scope's flows and compiles them.
func compileFlows(errs *errorList, scope string, list []Flow) []FlowRule {
	path := scope + ".flows"
	if len(list) > maxFlows {
		errs.add(path, "at most %d flows, got %d", maxFlows, len(list))
		return nil
	}
	var out []FlowRule
	seen := map[string]int{}
	for i, fl := range list {
		at := func(field string) string { return fmt.Sprintf("%s[%d].%s", path, i, field) }
		ok := true
		fail := func(field, format string, args ...any) {
			errs.add(at(field), format, args...)
			ok = false
		}
		pattern := func(field, s string) Pattern {
			p, err := parsePattern(s)
			switch {
			case s == "":
				fail(field, `required: a pattern in rule syntax, such as mcp__mail__read_inbox or "Bash(git push *)"`)
			case err != nil:
				fail(field, "%q: %v", s, err)
			}
			return p
		}
		after, then := pattern("after", fl.After), pattern("then", fl.Then)
		if len(fl.Unless) > maxUnless {
			fail("unless", "at most %d patterns, got %d", maxUnless, len(fl.Unless))
		}
		var unless []Pattern
		for j, s := range fl.Unless {
			f := fmt.Sprintf("unless[%d]", j)
			p := pattern(f, s)
			if p.tool != "" && then.tool != "" && !p.server && !then.matchesTool(p.tool) {
				fail(f, "%q names %s, which then (%q) does not match: it would exempt nothing", s, p.tool, fl.Then)
			}
			unless = append(unless, p)
		}
		within, err := time.ParseDuration(fl.Within)
		switch {
		case fl.Within == "":
			fail("within", "required: a duration such as 30s, 10m or 1h")
		case err != nil:
			fail("within", "must be a duration such as 30s, 10m or 1h, got %q", fl.Within)
		case within < MinFlowWithin || within > MaxFlowWithin:
			fail("within", "must be %s to %s, got %q", MinFlowWithin, "24h", fl.Within)
		}
		scopeOf := fl.Scope
		if scopeOf == "" {
			scopeOf = FlowByConversation
		} else if scopeOf != FlowByConversation && scopeOf != FlowByCaller {
			fail("scope", "must be conversation or caller, got %q", string(fl.Scope))
		}
		action := fl.Action
		if action == "" {
			action = machine.ActionAsk
		} else if action != machine.ActionAsk && action != machine.ActionDeny {
			fail("action", "must be ask or deny, got %q", string(fl.Action))
		}
		if len(fl.Reason) > MaxFlowReason || !utf8.ValidString(fl.Reason) {
			fail("reason", "must be valid UTF-8 of at most %d bytes, got %d bytes", MaxFlowReason, len(fl.Reason))
		}
		if !ok {
			continue
		}
		dup := fmt.Sprintf("%s\x00%s\x00%s", fl.After, fl.Then, scopeOf)
		if j, ok := seen[dup]; ok {
			errs.add(fmt.Sprintf("%s[%d]", path, i), "holds back the same calls as %s[%d] (the same after, then and scope): make it one flow", path, j)
			continue
		}
		seen[dup] = i
		out = append(out, FlowRule{Index: i, After: after, Then: then, Unless: unless, Within: within, WithinText: fl.Within,
			Scope: scopeOf, Action: action, Reason: fl.Reason, Source: scope, MarkID: flowMarkID(scope, fl.After, scopeOf)})
	}
	return out
}

// flowMarkID is FlowRule.MarkID: 20 hex digits, a valid KV key token.
func flowMarkID(source, after string, scope FlowScope) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "flow\x00%s\x00%s\x00%s", source, after, scope))
	return hex.EncodeToString(sum[:10])
}

// holds reports whether f holds back cs: then matches it and no unless
// pattern exempts it.
func (f FlowRule) holds(cs callSubject) bool {
	if !f.Then.matchCall(cs, false) {
		return false
	}
	for _, u := range f.Unless {
		if u.matchCall(cs, true) {
			return false
		}
	}
	return true
}

// flowCheck is what a flow found of a call it holds back.
type flowCheck struct {
	key    FlowKey
	mark   FlowMark
	marked bool  // a mark within the window
	err    error // the mark could not be read
}

// check reads f's mark for c, held back, at now.
func (e *Engine) checkFlow(ctx context.Context, f FlowRule, c machine.Call, now time.Time) flowCheck {
	fc := flowCheck{key: f.Key(c)}
	if e.flows == nil {
		fc.err = fmt.Errorf("no store of flow marks is configured")
		return fc
	}
	m, ok, err := e.flows.Last(ctx, fc.key)
	if err != nil {
		fc.err = err
		return fc
	}
	fc.mark = m
	fc.marked = ok && m.At.After(now.Add(-f.Within))
	return fc
}

// flow returns the verdict of the first flow that holds back c (cs) with
// a mark in its window; held is false when none does. A mark that cannot
// be read asks: whether the earlier call came is not known.
func (e *Engine) flow(ctx context.Context, r *Resolved, c machine.Call, cs callSubject) (v machine.Verdict, held bool) {
	now := e.now()
	for _, f := range r.Flows {
		if !f.holds(cs) {
			continue
		}
		fc := e.checkFlow(ctx, f, c, now)
		switch {
		case fc.err != nil:
			return verdict(machine.ActionAsk, fmt.Sprintf("%s: cannot read whether %s completed a call of %q within %s, so a human decides: %v",
				f, fc.key.Who(), f.After.String(), f.WithinText, fc.err)), true
		case fc.marked:
			return ruleVerdict(f.Action, f.reason(fc.mark)), true
		}
	}
	return machine.Verdict{}, false
}

// reason is the verdict reason of f holding a call back after m.
func (f FlowRule) reason(m FlowMark) string {
	s := fmt.Sprintf("%s: follows %s (%s), completed %s, within %s", f, m.ToolName, m.PendingID,
		m.At.UTC().Format(time.RFC3339), f.WithinText)
	if f.Reason != "" {
		s += ": " + f.Reason
	}
	return s
}

// HasFlows reports whether the document in force has any flow, in any
// scope: a gate marks completed calls only then.
func (e *Engine) HasFlows() bool {
	c := e.snap.Load().c
	if len(c.def.flows) > 0 {
		return true
	}
	for _, l := range c.teams {
		if len(l.flows) > 0 {
			return true
		}
	}
	for _, l := range c.convs {
		if len(l.flows) > 0 {
			return true
		}
	}
	return false
}

// MarkCompleted marks c, the call pendingID, as completed now for every
// flow in force for it whose after matches it (once per mark that flows
// share). A gate calls it as the call completes, before the completion
// is recorded, so that no call completes unmarked: an error is returned
// and the completion should wait for a retry.
func (e *Engine) MarkCompleted(ctx context.Context, c machine.Call, pendingID string) error {
	r := e.snap.Load().c.resolve(c.Team, c.ConversationID)
	if len(r.Flows) == 0 {
		return nil
	}
	args, err := callArguments(c)
	if err != nil {
		args = map[string]any{} // a specifier then cannot read it, and matches
	}
	cs := newCallSubject(c.ToolName, args, r.ArgumentOf(c.ToolName))
	if e.flows == nil {
		return nil // nothing to mark in: a call then matches is asked about anyway
	}
	now := e.now()
	done := map[FlowKey]bool{}
	for _, f := range r.Flows {
		key := f.Key(c)
		if done[key] || !f.After.matchCall(cs, false) {
			continue
		}
		done[key] = true
		if err := e.flows.Mark(ctx, key, FlowMark{ToolName: c.ToolName, PendingID: pendingID, At: now}); err != nil {
			return fmt.Errorf("%s: mark %s: %w", f, key.Who(), err)
		}
	}
	return nil
}

// FlowRules returns every flow of the document in force, of every scope:
// the default's, then each team's and each conversation's, by name.
func (e *Engine) FlowRules() []FlowRule {
	c := e.snap.Load().c
	out := slices.Clone(c.def.flows)
	for _, name := range slices.Sorted(maps.Keys(c.teams)) {
		out = append(out, c.teams[name].flows...)
	}
	for _, id := range slices.Sorted(maps.Keys(c.convs)) {
		out = append(out, c.convs[id].flows...)
	}
	return out
}

// flowPatterns are the patterns of a scope's flows, for the names a
// document names.
func flowPatterns(list []Flow) []string {
	var out []string
	for _, f := range list {
		out = append(out, f.After, f.Then)
		out = append(out, f.Unless...)
	}
	return out
}

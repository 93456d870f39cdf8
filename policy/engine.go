package policy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// Grants finds a human's standing permission for a call: "allow for this
// session" or "always allow". bus implements it on NATS KV.
type Grants interface {
	// Match returns a grant in force at now that covers c. A single-use
	// grant it returns is consumed: of calls racing for it, one gets it.
	Match(ctx context.Context, c machine.Call, now time.Time) (Grant, bool, error)
}

// Budget reserves estimated cost against a team's daily limit, both in
// micro-units. Reserve must be atomic: of two calls racing for the last of
// a budget, one gets it. It reports false, and reserves nothing, when
// amount would take the team's total for day past limit.
type Budget interface {
	Reserve(ctx context.Context, team string, day string, amount, limit Micros) (bool, error)
}

// Engine evaluates calls against a policy document. It is safe for
// concurrent use, and SetDocument replaces the document while calls are
// being evaluated: each evaluation sees one document, old or new, whole.
type Engine struct {
	snap   atomic.Pointer[snapshot]
	grants Grants
	budget Budget
	rates  RateCounter
	flows  FlowMarks
	now    func() time.Time
}

var _ machine.Evaluator = (*Engine)(nil)

type snapshot struct {
	doc   *Document
	c     *compiled
	names *vocabulary
	// revision is the policies bucket's revision doc was stored at; 0
	// for a document given directly.
	revision uint64
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// WithClock replaces time.Now, which picks the budget's day, for tests.
func WithClock(now func() time.Time) EngineOption { return func(e *Engine) { e.now = now } }

// NewEngine returns an Engine for doc (nil: built-in defaults only). grants
// and budget may be nil: then no grant ever matches, and a dailyCostLimit
// makes every costed call ask, since nothing can count what was spent.
func NewEngine(doc *Document, grants Grants, budget Budget, opts ...EngineOption) (*Engine, error) {
	e := &Engine{grants: grants, budget: budget, now: time.Now}
	for _, o := range opts {
		o(e)
	}
	if err := e.SetDocument(doc); err != nil {
		return nil, err
	}
	return e, nil
}

// SetDocument validates doc and, if it is valid, puts it in force for every
// evaluation from now on. An invalid document leaves the old one in force.
// The Engine keeps its own copy: changing doc afterwards changes nothing.
func (e *Engine) SetDocument(doc *Document) error { return e.SetStored(doc, 0) }

// SetStored is SetDocument for the document stored at revision of the
// policies bucket: every verdict from now on names that revision, so an
// entry says which policy version decided it.
func (e *Engine) SetStored(doc *Document, revision uint64) error {
	doc = doc.Clone()
	c, err := compile(doc)
	if err != nil {
		return err
	}
	e.snap.Store(&snapshot{doc: doc, c: c, names: vocabularyOf(doc), revision: revision})
	return nil
}

// Masker returns what masks the arguments of a call of team and
// conversationID for those who may not see its secrets (the built-in
// secret names and shapes, and the policy's redact patterns), and which
// roles may reveal them.
func (e *Engine) Masker(team, conversationID string) Masker {
	return e.snap.Load().c.masker(team, conversationID)
}

// Document returns a copy of the document in force.
func (e *Engine) Document() *Document { return e.snap.Load().doc.Clone() }

// Resolve returns the policy in force for a team and conversation.
func (e *Engine) Resolve(team, conversationID string) Resolved {
	return *e.snap.Load().c.resolve(team, conversationID)
}

// Evaluate decides what c needs. In order, the first that applies decides:
//
//  1. a deny rule: deny;
//  2. plan mode (the call's, else the policy's) and a tool that is not
//     read-only: deny;
//     then a rate rule with no slot left in its window: its then, ask or
//     deny (every rate rule the call matches takes a slot: ratelimit.go);
//     then a flow that holds the call back after an earlier call
//     completed within its window: its action, ask or deny (flow.go);
//  3. a Bash line whose code no rule can see: ask;
//  4. a grant: run;
//  5. an ask rule: ask;
//  6. bypassPermissions mode: run;
//  7. an allow rule: run;
//  8. a read-only tool: run;
//  9. acceptEdits mode and an edit tool: run;
//  10. a tool in requiresApprovalTools: ask;
//  11. otherwise run, after the tool's delay.
//
// Every run from steps 3 to 9 must then pass the cost checks: an estimated
// cost above requireApprovalAboveCost asks, and so does one the team's
// dailyCostLimit has no room left for. The verdict's Reason names the rule
// or field that decided, and the scope it came from.
//
// Errors: a call whose arguments are not a JSON object, or whose
// permission mode or estimated cost is invalid, wraps machine.ErrInvalid;
// an error from Grants, Budget or a RateCounter is returned, wrapped,
// rather than guessed around: Submit fails and the agent retries, where a
// guess would either ask a human needlessly or run a call nobody allowed.
func (e *Engine) Evaluate(ctx context.Context, c machine.Call) (machine.Verdict, error) {
	return e.evaluate(ctx, c, false)
}

var _ machine.EditChecker = (*Engine)(nil)

// CheckEdit implements machine.EditChecker: it evaluates c, a call with
// an approver's edited arguments, as Evaluate would a submission of it,
// but dry: no grant is consulted (a human approves the call anyway) and
// no budget reserved. A tool that editable says false of is denied any
// edit.
func (e *Engine) CheckEdit(ctx context.Context, c machine.Call) (machine.Verdict, error) {
	r := e.snap.Load().c.resolve(c.Team, c.ConversationID)
	if ok, set := r.Editable[c.ToolName]; set && !ok {
		f := index("editable", c.ToolName)
		return verdict(machine.ActionDeny, fmt.Sprintf("%s false (%s)", f, r.Sources[f])), nil
	}
	return e.EvaluateDry(ctx, c)
}

// EvaluateDry implements machine.EditChecker: Evaluate, but changing
// nothing (no grant consulted, no budget reserved).
func (e *Engine) EvaluateDry(ctx context.Context, c machine.Call) (machine.Verdict, error) {
	return e.evaluate(ctx, c, true)
}

// evaluate is Evaluate; dry, it changes nothing (see CheckEdit).
func (e *Engine) evaluate(ctx context.Context, c machine.Call, dry bool) (machine.Verdict, error) {
	args, err := callArguments(c)
	if err != nil {
		return machine.Verdict{}, fmt.Errorf("evaluate %s: %w", c.ToolName, err)
	}
	if math.IsNaN(c.EstimatedCost) || math.IsInf(c.EstimatedCost, 0) || c.EstimatedCost < 0 {
		return machine.Verdict{}, fmt.Errorf("evaluate %s: %w", c.ToolName,
			fieldErrorf("estimatedCost", "must be a finite number >= 0, got %v", c.EstimatedCost))
	}
	snap := e.snap.Load()
	r := snap.c.resolve(c.Team, c.ConversationID)
	v, err := e.decide(ctx, r, c, args, dry)
	if err != nil {
		return machine.Verdict{}, fmt.Errorf("evaluate %s: %w", c.ToolName, err)
	}
	cs := newCallSubject(c.ToolName, args, r.ArgumentOf(c.ToolName))
	v.Risk = r.risk(cs)
	// The description is shown to whoever sees the call: it says what the
	// call does with its secrets masked.
	if masked, ok := (Masker{patterns: r.Redact}).Mask(c.Arguments); ok {
		c.Arguments = masked
		if args, err = callArguments(c); err != nil {
			return machine.Verdict{}, fmt.Errorf("evaluate %s: %w", c.ToolName, err)
		}
	}
	v.Description = r.Description(c.ToolName, args, c.Arguments)
	v.MaxExecutionAttempts = r.MaxExecutionAttempts
	v.Idempotent = r.idempotent(cs)
	v.Currency = r.Currency
	v.OverCostLimit = r.RequireApprovalAboveCost != nil && MicrosOf(c.EstimatedCost) > MicrosOf(*r.RequireApprovalAboveCost)
	v.PolicyRevision = snap.revision
	if v.Action == machine.ActionAsk {
		v.ApprovalTimeout = r.ApprovalTimeout
		v.AutoRejectOnTimeout = r.AutoRejectOnTimeout
		v.ApprovalReminder = r.ApprovalTimeout * time.Duration(r.ApprovalReminderPercent) / 100
		v.Approver = r.UserIDToApprove
		v.Approvers = slices.Clone(r.Approvers)
		v.Quorum = r.quorum(cs)
		v.Escalate = r.tiers()
		v.OnTimeout, v.Respondable = r.onTimeout(cs), r.respondable(cs)
		ok, set := r.Editable[c.ToolName]
		v.NotEditable = set && !ok
	}
	return v, nil
}

func (e *Engine) decide(ctx context.Context, r *Resolved, c machine.Call, args map[string]any, dry bool) (machine.Verdict, error) {
	tool := c.ToolName
	call := newCallSubject(tool, args, r.ArgumentOf(tool))
	if rule, ok := firstMatch(r.Rules.Deny, call, false); ok {
		return ruleVerdict(machine.ActionDeny, ruleReason(rule, call)), nil
	}
	mode, modeFrom, err := r.mode(c.PermissionMode)
	if err != nil {
		return machine.Verdict{}, err
	}
	if mode == ModePlan && !r.ReadOnly(tool) {
		return verdict(machine.ActionDeny, fmt.Sprintf("permissionMode plan (%s): %s is not in readOnlyTools (%s)",
			modeFrom, tool, r.Sources["readOnlyTools"])), nil
	}
	if v, limited, err := e.rateLimit(ctx, r, c, call, dry); err != nil || limited {
		return v, err
	}
	if v, held := e.flow(ctx, r, c, call); held {
		return v, nil
	}
	if call.hidden {
		// No rule can see what this line runs (eval, a shell reading a
		// string or its input, a command only known when it runs, a line
		// that does not parse): a human decides, whatever else says run.
		return verdict(machine.ActionAsk, hiddenReason), nil
	}
	// A call under a quorum is asked each time: a grant (one approver's
	// say) does not cover it.
	if e.grants != nil && !dry && r.quorum(call) == nil {
		g, ok, err := e.grants.Match(ctx, c, e.now())
		if err != nil {
			return machine.Verdict{}, fmt.Errorf("grants: %w", err)
		}
		if ok {
			v := verdict(machine.ActionRun, g.String())
			v.DecidedBy = machine.DecidedByGrant
			return e.charge(ctx, r, c, dry, v)
		}
	}
	// Ask rules hold even under bypassPermissions, as in Claude Code:
	// the mode skips the questions a policy asks by default, not the ones
	// a rule names.
	if rule, ok := firstMatch(r.Rules.Ask, call, false); ok {
		return ruleVerdict(machine.ActionAsk, ruleReason(rule, call)), nil
	}
	if mode == ModeBypassPermissions {
		return verdict(machine.ActionRun, fmt.Sprintf("permissionMode bypassPermissions (%s)", modeFrom)), nil
	}
	if rule, ok := firstMatch(r.Rules.Allow, call, true); ok {
		return e.charge(ctx, r, c, dry, ruleVerdict(machine.ActionRun, rule.String()))
	}
	if r.ReadOnly(tool) {
		return e.charge(ctx, r, c, dry, verdict(machine.ActionRun, fmt.Sprintf("readOnlyTools (%s)", r.Sources["readOnlyTools"])))
	}
	if mode == ModeAcceptEdits && r.EditTool(tool) {
		return e.charge(ctx, r, c, dry, verdict(machine.ActionRun, fmt.Sprintf("permissionMode acceptEdits (%s): editTools (%s)",
			modeFrom, r.Sources["editTools"])))
	}
	if r.RequiresApprovalTools.Contains(tool) {
		return verdict(machine.ActionAsk, fmt.Sprintf("requiresApprovalTools (%s)", r.Sources["requiresApprovalTools"])), nil
	}
	delay, why := r.Delay(tool)
	v := verdict(machine.ActionRun, fmt.Sprintf("not in requiresApprovalTools (%s); %s", r.Sources["requiresApprovalTools"], why))
	v.Delay = delay
	return e.charge(ctx, r, c, dry, v)
}

// hiddenReason is why a command line no rule can see through is asked about.
const hiddenReason = "the command runs code no rule can check (eval, a shell, source, a command chosen when it runs, or a line that does not parse)"

func verdict(a machine.Action, reason string) machine.Verdict {
	return machine.Verdict{Action: a, Reason: reason}
}

// ruleVerdict is the verdict of an allow, ask or deny rule.
func ruleVerdict(a machine.Action, reason string) machine.Verdict {
	return machine.Verdict{Action: a, Reason: reason, DecidedBy: machine.DecidedByRule}
}

// charge applies cost protection to a call about to run. The threshold is
// checked first so a call that will be asked about anyway reserves nothing.
// Giving a reservation back (a call cancelled, or cheaper than estimated)
// is for whoever sees the call end; the verdict says what was reserved.
// Costs and limits are compared in micro-units (Micros), as the budget
// sums them.
func (e *Engine) charge(ctx context.Context, r *Resolved, c machine.Call, dry bool, run machine.Verdict) (machine.Verdict, error) {
	cost := MicrosOf(c.EstimatedCost)
	if t := r.RequireApprovalAboveCost; t != nil && cost > MicrosOf(*t) {
		return verdict(machine.ActionAsk, fmt.Sprintf("requireApprovalAboveCost %s < %s (%s)",
			formatNumber(*t), cost, r.Sources["requireApprovalAboveCost"])), nil
	}
	limit := r.DailyCostLimit
	if limit == nil || cost == 0 || dry {
		return run, nil
	}
	what := fmt.Sprintf("dailyCostLimit %s (%s)", formatNumber(*limit), r.Sources["dailyCostLimit"])
	if e.budget == nil {
		return verdict(machine.ActionAsk, what+": no budget is configured to count spending against it"), nil
	}
	day := e.now().UTC().Format("2006-01-02")
	ok, err := e.budget.Reserve(ctx, c.Team, day, cost, MicrosOf(*limit))
	if err != nil {
		return machine.Verdict{}, fmt.Errorf("reserve %s of team %q's budget for %s: %w", cost, c.Team, day, err)
	}
	if !ok {
		return verdict(machine.ActionAsk, fmt.Sprintf("%s would be exceeded: no room for %s more on %s",
			what, cost, day)), nil
	}
	// The entry records the reservation, so that whoever sees the call
	// end can settle it at the real cost or release it. It is the
	// micro-units reserved, which read back are the same micro-units.
	run.CostReserved, run.CostDay = cost.Float64(), day
	return run, nil
}

// mode is the permission mode in force for a call, and where it came from.
func (r *Resolved) mode(callMode string) (Mode, string, error) {
	m, from := Mode(callMode), "call"
	if callMode == "" {
		m, from = r.PermissionMode, r.Sources["permissionMode"]
	}
	if !m.Valid() {
		return "", "", fieldErrorf("permissionMode", "must be default, acceptEdits, plan or bypassPermissions, got %q", callMode)
	}
	if m == ModeBypassPermissions && r.DisableBypassPermissionsMode {
		return ModeDefault, "disableBypassPermissionsMode (" + r.Sources["disableBypassPermissionsMode"] + ")", nil
	}
	return m, from, nil
}

// DeniedTools returns, of tools, those the policy in force for team and
// conversationID denies whatever a call's arguments, each with the rule or
// field that denies it: a deny rule naming the tool (or its MCP server)
// without a specifier, or plan mode (permissionMode, else the policy's)
// for a tool that is not read-only. A tool a rule denies only for some
// arguments is not among them: its calls are decided one by one.
func (e *Engine) DeniedTools(team, conversationID, permissionMode string, tools []string) (map[string]string, error) {
	r := e.snap.Load().c.resolve(team, conversationID)
	mode, modeFrom, err := r.mode(permissionMode)
	if err != nil {
		return nil, err
	}
	denied := map[string]string{}
	for _, tool := range tools {
		for _, rule := range r.Rules.Deny {
			if rule.Pattern.re == nil && rule.Pattern.matchesTool(tool) {
				denied[tool] = rule.String()
				break
			}
		}
		if _, ok := denied[tool]; !ok && mode == ModePlan && !r.ReadOnly(tool) {
			denied[tool] = fmt.Sprintf("permissionMode plan (%s): %s is not in readOnlyTools (%s)", modeFrom, tool, r.Sources["readOnlyTools"])
		}
	}
	return denied, nil
}

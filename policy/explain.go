package policy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// Explanation says how the policy in force decides one call: the verdict
// of a dry evaluation (EvaluateDry: no grant consulted, no budget or rate
// slot taken), the argument the call's rules read, and each rule of the
// call's tool, matched or not and why.
type Explanation struct {
	Verdict machine.Verdict
	// Argument is the name of the argument the specifiers on the call's
	// tool read ("" when nothing names one), and Value its value, whole;
	// Unreadable says why the call gives none ("" when it does).
	Argument, Value, Unreadable string
	// Rules are the rules of every scope in force that name the call's
	// tool (or its MCP server, or its family), in the order they are
	// checked: deny, ask, allow, each narrowest scope first.
	Rules []RuleCheck
	// Flows are the flows in force whose then names the call's tool, in
	// the order they are checked.
	Flows []FlowExplained
}

// FlowExplained is one flow as it applies to the explained call.
type FlowExplained struct {
	Flow FlowRule
	// Held: then matches the call and no unless pattern exempts it.
	Held bool
	// Marked: a call after matches completed within the window before
	// the call, in its conversation or of its caller: Mark is the latest.
	Marked bool
	Mark   FlowMark
	// Decided: the verdict is this flow's.
	Decided bool
	// Why says in a few words what the flow found.
	Why string
}

// RuleCheck is one rule as it applies to the explained call.
type RuleCheck struct {
	Rule Rule
	// Matched: the rule applies to the call (a deny or ask rule whose
	// argument cannot be read applies; an allow rule does not).
	Matched bool
	// Decided: the verdict is this rule's.
	Decided bool
	// Why says in a few words why it matched or did not.
	Why string
}

// Explain evaluates c as EvaluateDry does and says which rules of its
// tool matched, against which argument, and why the others did not.
// Nothing is written.
func (e *Engine) Explain(ctx context.Context, c machine.Call) (Explanation, error) {
	v, err := e.EvaluateDry(ctx, c)
	if err != nil {
		return Explanation{}, err
	}
	args, err := callArguments(c)
	if err != nil {
		return Explanation{}, fmt.Errorf("explain %s: %w", c.ToolName, err)
	}
	r := e.snap.Load().c.resolve(c.Team, c.ConversationID)
	cs := newCallSubject(c.ToolName, args, r.ArgumentOf(c.ToolName))
	x := Explanation{Verdict: v, Argument: cs.arg, Value: cs.value, Unreadable: cs.why}
	decided := false
	for _, rules := range [][]Rule{r.Rules.Deny, r.Rules.Ask, r.Rules.Allow} {
		for _, rule := range rules {
			if !rule.Pattern.matchesTool(c.ToolName) {
				continue
			}
			rc := RuleCheck{Rule: rule, Matched: rule.Pattern.matchCall(cs, rule.Kind == "allow")}
			rc.Why = whyMatch(rule, rc.Matched, cs)
			if rc.Matched && !decided && strings.HasPrefix(v.Reason, rule.String()) {
				rc.Decided, decided = true, true
			}
			x.Rules = append(x.Rules, rc)
		}
	}
	x.Flows = e.explainFlows(ctx, r, c, cs, v)
	return x, nil
}

// explainFlows says, of each flow whose then names c's tool, whether it
// holds c back and which earlier call, if any, makes it apply.
func (e *Engine) explainFlows(ctx context.Context, r *Resolved, c machine.Call, cs callSubject, v machine.Verdict) []FlowExplained {
	var out []FlowExplained
	decided := false
	now := e.now()
	for _, f := range r.Flows {
		if !f.Then.matchesTool(c.ToolName) {
			continue
		}
		fx := FlowExplained{Flow: f, Held: f.holds(cs)}
		switch {
		case !f.Then.matchCall(cs, false):
			fx.Why = "then does not match the call"
		case !fx.Held:
			fx.Why = "an unless pattern exempts the call"
		default:
			fc := e.checkFlow(ctx, f, c, now)
			fx.Mark, fx.Marked = fc.mark, fc.marked
			switch {
			case fc.err != nil:
				fx.Why = "cannot read its mark, so it asks: " + fc.err.Error()
			case fc.marked:
				fx.Why = fmt.Sprintf("follows %s (%s), completed %s in %s, within %s", fc.mark.ToolName, fc.mark.PendingID,
					fc.mark.At.UTC().Format(time.RFC3339), fc.key.Who(), f.WithinText)
			default:
				fx.Why = fmt.Sprintf("no call of %q completed in %s within the last %s", f.After.String(), fc.key.Who(), f.WithinText)
			}
		}
		if fx.Held && !decided && strings.HasPrefix(v.Reason, f.String()) {
			fx.Decided, decided = true, true
		}
		out = append(out, fx)
	}
	return out
}

// whyMatch says why rule matched cs or did not.
func whyMatch(rule Rule, matched bool, cs callSubject) string {
	p := rule.Pattern
	switch {
	case p.re == nil:
		return "it names the tool, without a specifier: every call"
	case !cs.ok && matched:
		return "it cannot read the call's argument (" + cs.why + "), so it applies"
	case !cs.ok:
		return "it cannot read the call's argument (" + cs.why + "), so it allows nothing"
	case cs.shell && matched && rule.Kind == "allow":
		return "it matches every command of " + cs.arg
	case cs.shell && matched:
		return "it matches " + cs.arg + " or a command in it"
	case cs.shell && rule.Kind == "allow":
		return "it does not match every command of " + cs.arg
	case matched:
		return "it matches " + cs.arg
	}
	return "it does not match " + cs.arg
}

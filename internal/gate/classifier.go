package gate

import (
	"context"
	"strings"

	"github.com/toolgate/toolgate/machine"
)

// ClassifierCallPrefix starts the toolCallId of a call that Claude Code's
// own classifier (its auto mode) denied, as Claude Code's PermissionDenied
// hook submits it (internal/claudecode names the same prefix): the call is
// recorded, so analytics and receipts see it, and is never run on the
// policy's word.
const ClassifierCallPrefix = "cc-classifier_"

// ClassifierProvenance names Claude Code's classifier as what decided, at
// the start of the reason such a call records.
const ClassifierProvenance = "claude-code:classifier"

// classifierAware is the Service's evaluator: its policy's, except for a
// call Claude Code's classifier denied (ClassifierCallPrefix), which the
// policy never lets run:
//
//   - the policy denies it: its deny stands, naming its rule;
//   - the policy asks a human about it (the tool is one a human decides):
//     the classifier's denial becomes that approval request, with the
//     policy's approvers and deadline, for a human to overrule;
//   - the policy would let it run: it is denied, the classifier deciding
//     (machine.DecidedByClassifier).
//
// So a toolCallId an agent chooses can make its own call stricter, never
// let it run. The policy is asked as it would be about a submit, changing
// nothing (no budget reserved, no grant used) when it can. The reason a
// denied or asked call records starts with ClassifierProvenance.
type classifierAware struct{ policy machine.Evaluator }

func (e classifierAware) Evaluate(ctx context.Context, c machine.Call) (machine.Verdict, error) {
	if !strings.HasPrefix(c.ToolCallID, ClassifierCallPrefix) {
		return e.policy.Evaluate(ctx, c)
	}
	dry := e.policy.Evaluate
	if ec, ok := e.policy.(machine.EditChecker); ok {
		dry = ec.EvaluateDry
	}
	v, err := dry(ctx, c)
	if err != nil {
		return v, err
	}
	switch v.Action {
	case machine.ActionDeny:
		return v, nil
	case machine.ActionAsk:
		v.Reason = ClassifierProvenance + " denied it; a human may overrule that, as the policy asks one about it (" + v.Reason + ")"
		return v, nil
	default:
		return machine.Verdict{
			Action:         machine.ActionDeny,
			Reason:         ClassifierProvenance + " denied it (the policy alone would let it run: " + v.Reason + ")",
			DecidedBy:      machine.DecidedByClassifier,
			PolicyRevision: v.PolicyRevision,
			Risk:           v.Risk,
			Description:    v.Description,
		}, nil
	}
}

// withClassifier wraps policy in classifierAware; when policy checks
// edits and resubmits (machine.EditChecker), so does the wrapper, with
// policy's own checks.
func withClassifier(policy machine.Evaluator) machine.Evaluator {
	if ec, ok := policy.(machine.EditChecker); ok {
		return classifierAwareChecker{classifierAware{policy}, ec}
	}
	return classifierAware{policy}
}

// classifierAwareChecker is classifierAware over a policy that checks
// edits: those checks are the policy's.
type classifierAwareChecker struct {
	classifierAware
	machine.EditChecker
}

package claudecode

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// classifierCallPrefix starts the toolCallId of a call Claude Code's
// classifier denied, as the PermissionDenied hook submits it: toolgate
// (gate.ClassifierCallPrefix) records such a call REJECTED_BY_POLICY, the
// classifier deciding, or, where its policy asks a human about the call,
// as an approval request for a human to overrule the classifier; never
// runs it on the policy's word.
const classifierCallPrefix = "cc-classifier_"

// PermissionDeniedOutput is a PermissionDenied hook's answer: Retry tells
// the model it may try the call again.
type PermissionDeniedOutput struct {
	HookSpecificOutput struct {
		HookEventName string `json:"hookEventName"`
		Retry         bool   `json:"retry"`
	} `json:"hookSpecificOutput"`
}

// permissionDenied records a call Claude Code's classifier denied, and
// waits, within the hook's wait, for a human to overrule it where the
// policy lets one: approved, the answer asks Claude Code to retry (the
// retried call is allowed by the approval: see overruled). Otherwise the
// denial stands and the answer is {}; a call nobody decided within the
// wait is withdrawn, saying so.
func permissionDenied(ctx context.Context, g Gate, in Input, opts Options) (any, error) {
	if in.ToolUseID == "" {
		return nil, fmt.Errorf("%w: hook input: tool_use_id: required for PermissionDenied", machine.ErrInvalid)
	}
	wait, err := WaitFor(opts.Wait, opts.Timeout)
	if err != nil {
		return nil, err
	}
	call := in.Call(opts.Caller, opts.Team)
	call.ToolCallID = classifierCallPrefix + in.ToolUseID
	if len(call.ToolCallID) > machine.MaxID {
		return nil, fmt.Errorf("%w: hook input: tool_use_id: at most %d bytes, got %d", machine.ErrInvalid, machine.MaxID-len(classifierCallPrefix), len(in.ToolUseID))
	}
	v := client.SubmitAndWaitWith(ctx, g, call, client.WaitOptions{
		Asked: opts.Asked, Wait: wait, Timeout: opts.timeout(), By: opts.Caller, WithdrawNote: ": Claude Code's classifier's denial stands", Stopped: stopped,
	})
	switch v.Kind {
	case client.VerdictRun:
		var out PermissionDeniedOutput
		out.HookSpecificOutput.HookEventName = EventPermissionDenied
		out.HookSpecificOutput.Retry = true
		return out, nil
	case client.VerdictUnreachable:
		return nil, v.Err
	default:
		return struct{}{}, nil
	}
}

// overruled is the answer to a PreToolUse in auto mode whose call a human
// approved, overruling Claude Code's classifier (the call the
// PermissionDenied hook recorded, of the same session, tool and input):
// the retry the approval asked for. It claims that call for Claude Code,
// so the approval lets one retry run, and its PostToolUse settles it. ok
// is false when there is none.
func overruled(ctx context.Context, g Gate, in Input, opts Options) (Decision, bool) {
	if in.PermissionMode != "auto" {
		return Decision{}, false
	}
	calls, err := g.Calls(ctx, in.SessionID, in.ToolName)
	if err != nil {
		return Decision{}, false // the usual path asks toolgate, and says what failed
	}
	for _, e := range calls {
		asked := e.ToolArguments
		if len(e.OriginalArguments) > 0 {
			asked = e.OriginalArguments
		}
		if e.Status != machine.StateApproved || !strings.HasPrefix(e.ToolCallID, classifierCallPrefix) || !machine.SameJSON(asked, in.ToolInput) {
			continue
		}
		if _, err := g.Started(ctx, e.PendingID, opts.Caller); err != nil {
			if errors.Is(err, machine.ErrConflict) {
				continue // another retry took it
			}
			return Decision{}, false
		}
		o := client.Outcome{Kind: client.Approved, PendingID: e.PendingID, Arguments: e.ToolArguments, Edited: len(e.OriginalArguments) > 0,
			By: e.ApprovedOrRejectedByUserID, Reason: e.StatusReason, Scope: e.DecisionScope, Entry: e}
		d := Decide(o, nil)
		d.Reason = fmt.Sprintf("toolgate: allowed by %s, overruling Claude Code's classifier (%s)", o.By, e.PendingID)
		d.Context = "Claude Code's classifier denied this call; " + d.Context
		return d, true
	}
	return Decision{}, false
}

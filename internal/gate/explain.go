package gate

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// PolicyExplain evaluates one call, as r describes it, through the policy
// in force and says how it is decided: the verdict and its reason, the
// argument the tool's rules read and its value, and each rule of the tool
// with whether it matched and why, and each flow that holds back calls
// of the tool, after which earlier call. The evaluation is dry (no grant
// consulted, no budget or rate slot taken; the flows' marks are read)
// and nothing is written: no bucket, no event. Viewers and approvers
// may, as they may read the policy; the call's arguments are the
// caller's own.
func (s *Service) PolicyExplain(ctx context.Context, a Actor, r wire.PolicyExplainRequest) (*wire.PolicyExplainReply, error) {
	if err := a.require("explain the policy", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	if !machine.ValidToolName(r.ToolName) {
		return nil, fmt.Errorf("%w: toolName: must be 1 to 128 letters, digits, '_' or '-', got %q", machine.ErrInvalid, r.ToolName)
	}
	for _, f := range []struct{ name, v string }{{"team", r.Team}, {"conversationId", r.ConversationID}, {"callerBotId", r.CallerBotID}} {
		if len(f.v) > machine.MaxID {
			return nil, fmt.Errorf("%w: %s: at most %d bytes, got %d", machine.ErrInvalid, f.name, machine.MaxID, len(f.v))
		}
	}
	if m := policy.Mode(r.PermissionMode); r.PermissionMode != "" && !m.Valid() {
		return nil, fmt.Errorf("%w: permissionMode: must be default, acceptEdits, plan or bypassPermissions, got %q", machine.ErrInvalid, r.PermissionMode)
	}
	doc, rev, err := s.policies.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("the policy in force: %w", err)
	}
	engine, err := policy.NewEngine(doc, nil, nil, policy.WithClock(s.now), s.readFlowMarks())
	if err != nil {
		return nil, fmt.Errorf("the policy in force: %w", err)
	}
	x, err := engine.Explain(ctx, machine.Call{ToolName: r.ToolName, Arguments: r.Arguments,
		Team: r.Team, ConversationID: r.ConversationID, PermissionMode: r.PermissionMode, CallerBotID: r.CallerBotID})
	if err != nil {
		return nil, err // arguments that are not an object, a bad mode: machine.ErrInvalid
	}
	reply := &wire.PolicyExplainReply{
		PolicyRevision: rev, Verdict: verdictOf(x.Verdict.Action), Reason: x.Verdict.Reason,
		DelayMs: x.Verdict.Delay.Milliseconds(), Argument: x.Argument, Value: clip(x.Value, wire.MaxExplainValue),
		Unreadable: x.Unreadable, Rules: []wire.ExplainedRule{},
	}
	for _, rc := range x.Rules {
		reply.Rules = append(reply.Rules, wire.ExplainedRule{Scope: rc.Rule.Scope, Kind: rc.Rule.Kind, Index: rc.Rule.Index,
			Pattern: rc.Rule.Pattern.String(), Matched: rc.Matched, Decided: rc.Decided, Why: rc.Why})
	}
	reply.Flows = explainedFlows(x.Flows) // flows.go
	return reply, nil
}

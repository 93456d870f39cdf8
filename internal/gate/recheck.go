package gate

import (
	"context"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Recheck evaluates a call again through the policy in force, for whoever
// is about to run it (an executor any call, an agent its own): a call a
// human approved before a deny rule that now matches it was added is
// not to run. The evaluation is dry (no grant consulted, no budget or
// rate slot taken) and nothing is written; the call's arguments are
// those it would run with, as stored.
func (s *Service) Recheck(ctx context.Context, a Actor, r wire.RecheckRequest) (*wire.RecheckReply, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	e, _, err := s.read(ctx, a, r.PendingID)
	if err != nil {
		return nil, err
	}
	doc, rev, err := s.policies.Get(ctx)
	if err != nil {
		return nil, err
	}
	engine, err := policy.NewEngine(doc, nil, nil, policy.WithClock(s.now))
	if err != nil {
		return nil, err
	}
	v, err := engine.EvaluateDry(ctx, machine.Call{ToolCallID: e.ToolCallID, ToolName: e.ToolName, Arguments: e.ToolArguments,
		CallerBotID: e.CallerBotID, ConversationID: e.ConversationID, Team: e.Team, TaskID: e.TaskID, PermissionMode: e.PermissionMode})
	if err != nil {
		return nil, err
	}
	reply := &wire.RecheckReply{PolicyRevision: rev}
	if v.Action == machine.ActionDeny {
		reply.Denied = v.Reason
	}
	return reply, nil
}

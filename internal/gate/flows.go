package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// flowMarker is what of the policy marks the calls the flows' after
// patterns match as they complete: *policy.Engine has it.
type flowMarker interface {
	HasFlows() bool
	MarkCompleted(ctx context.Context, c machine.Call, pendingID string) error
}

// complete is the machine's Complete, after the flows in force have
// marked the call as completed (policy.Engine.MarkCompleted): the mark is
// written first, so that no call completes unmarked. A mark that cannot
// be written leaves the call running and its report refused, for the
// executor to send again; a mark written for a completion the machine
// then refuses (a lease lost meanwhile) only makes a later call ask.
func (s *Service) complete(ctx context.Context, pendingID string, o machine.Outcome) (*machine.Entry, error) {
	if err := s.markFlows(ctx, pendingID); err != nil {
		return nil, err
	}
	s.markShadowFlows(ctx, pendingID) // shadow.go: best effort, nothing in force reads it
	return s.m.Complete(ctx, pendingID, o)
}

// markFlows marks the call pendingID for the flows in force, when the
// policy has any. The entry is the one this process last saw, or one
// read: its call never changes but by an approver's edit, which comes
// before it runs.
func (s *Service) markFlows(ctx context.Context, pendingID string) error {
	if s.flows == nil || !s.flows.HasFlows() {
		return nil
	}
	e, err := s.latest(ctx, pendingID)
	if err != nil {
		return fmt.Errorf("succeeded %s: %w", pendingID, err)
	}
	if e.Status.Terminal() {
		return nil // finished: the machine refuses the report
	}
	if err := s.flows.MarkCompleted(ctx, e.Call(), e.PendingID); err != nil {
		return fmt.Errorf("succeeded %s: not recorded, as its completion could not be marked for the policy's flows: report it again: %w", pendingID, err)
	}
	return nil
}

// newFlowMarks is the flows' marks over cfg's buckets, or nil without a
// connection or a bucket for them.
func newFlowMarks(cfg Config) *stores.FlowMarks {
	if cfg.Conn == nil || cfg.Buckets.Flows == nil {
		return nil
	}
	return stores.NewFlowMarks(cfg.Conn.JetStream(), cfg.Buckets.Flows)
}

// readFlowMarks gives an Engine that explains a call the marks to read:
// without them, it says a held call asks, since it cannot tell.
func (s *Service) readFlowMarks() policy.EngineOption {
	if s.flowMarks == nil {
		return func(*policy.Engine) {}
	}
	return policy.WithFlowMarks(s.flowMarks)
}

// explainedFlows is what an explanation says of each flow, as the wire
// has it.
func explainedFlows(flows []policy.FlowExplained) []wire.ExplainedFlow {
	var out []wire.ExplainedFlow
	for _, f := range flows {
		xf := wire.ExplainedFlow{Flow: f.Flow.String(), Scope: string(f.Flow.Scope), Within: f.Flow.WithinText,
			Action: string(f.Flow.Action), Held: f.Held, Decided: f.Decided, Why: f.Why}
		if f.Marked {
			xf.After = &wire.FlowCall{ToolName: f.Mark.ToolName, PendingID: f.Mark.PendingID, CompletedAt: f.Mark.At.UnixMilli()}
		}
		out = append(out, xf)
	}
	return out
}

// flowReplay is what a dry run needs to replay the flows: the marks each
// policy's flows leave as the recorded calls complete, in memory, and
// the time of the step being replayed, which both policies tell time by.
type flowReplay struct {
	at    time.Time
	marks [2]policy.MemoryFlowMarks // the current policy's, the candidate's
}

// options are the Engine options of policy i (0: current, 1: candidate)
// in the replay.
func (fr *flowReplay) options(i int) []policy.EngineOption {
	return []policy.EngineOption{policy.WithClock(func() time.Time { return fr.at }), policy.WithFlowMarks(&fr.marks[i])}
}

// replayStep is a recorded call submitted, or completed.
type replayStep struct {
	e         *machine.Entry
	at        time.Time
	completed bool
}

// replaySteps orders the recorded calls' submits from since, and, when
// flows are replayed, their completions (COMPLETED_SUCCESS) of any time,
// by when each happened; a completion comes before a submit of the same
// millisecond, as the gate marks a call before recording it completed.
func replaySteps(entries []*machine.Entry, since int64, flows bool) []replayStep {
	var steps []replayStep
	for _, e := range entries {
		if e.RequestedAt >= since {
			steps = append(steps, replayStep{e: e, at: time.UnixMilli(e.RequestedAt)})
		}
		if t := e.LastTransition; flows && e.Status == machine.StateCompletedSuccess && t != nil && t.To == machine.StateCompletedSuccess {
			steps = append(steps, replayStep{e: e, at: time.UnixMilli(t.At), completed: true})
		}
	}
	slices.SortStableFunc(steps, func(x, y replayStep) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		switch {
		case x.completed && !y.completed:
			return -1
		case y.completed && !x.completed:
			return 1
		}
		return strings.Compare(x.e.PendingID, y.e.PendingID)
	})
	return steps
}

// mark replays e's completion through both policies' flows.
func (fr *flowReplay) mark(ctx context.Context, e *machine.Entry, policies ...*policy.Engine) error {
	for _, p := range policies {
		if err := p.MarkCompleted(ctx, e.Call(), e.PendingID); err != nil {
			return err
		}
	}
	return nil
}

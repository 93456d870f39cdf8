package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/toolgate/toolgate/machine"
)

// errTaken says another PostToolUse hook settled the call first.
var errTaken = errors.New("settled by another hook")

// record marks a call Claude Code ran as finished, so its entry ends
// COMPLETED_SUCCESS or COMPLETED_FAILURE with the tool's response.
//
// The call is the one of the input's tool_use_id when there is one (a
// PreToolUse hook or the MCP tool submitted it under that id). A call
// asked as a PermissionRequest has an id of its own (its input carries no
// tool_use_id), so when the id matches nothing, the call is the oldest
// open one of the same session and tool whose arguments are the input the
// tool ran with: approved or scheduled (toolgate let it run), else one
// Claude Code's identity already holds as running (a hook that stopped
// between its claim and its report). Two identical requests allowed
// together are settled oldest first, one per PostToolUse.
func record(ctx context.Context, g Gate, in Input, opts Options) error {
	if in.ToolUseID != "" {
		e, err := g.Get(ctx, machine.PendingID(in.SessionID, in.ToolUseID))
		switch {
		case err == nil:
			if err := settle(ctx, g, in, opts, e); !errors.Is(err, errTaken) {
				return err
			}
			return nil // recorded already: the hook ran twice
		case !errors.Is(err, machine.ErrNotFound):
			return err
		}
	}
	calls, err := g.Calls(ctx, in.SessionID, in.ToolName)
	if err != nil {
		return err
	}
	for _, e := range candidates(calls, in.ToolInput) {
		if err := settle(ctx, g, in, opts, e); !errors.Is(err, errTaken) {
			return err
		}
	}
	// A prompt the channel relayed, answered first in Claude Code.
	_, err = withdrawAnsweredLocally(ctx, g, in, opts, calls)
	return err // else: a call toolgate was not asked about
}

// candidates are the calls a PostToolUse without a call of its own may
// settle: those with input as their arguments that toolgate let run,
// oldest first, then those Claude Code's identity holds as running.
func candidates(calls []*machine.Entry, input json.RawMessage) []*machine.Entry {
	var runnable, running []*machine.Entry
	for _, e := range calls {
		if !machine.SameJSON(e.ToolArguments, input) {
			continue
		}
		switch {
		case e.Status == machine.StateApproved, e.Status == machine.StateScheduled:
			runnable = append(runnable, e)
		case e.Status == machine.StateExecuting && e.Lease != nil && e.Lease.Holder == e.CallerBotID:
			running = append(running, e)
		}
	}
	byAge := func(a, b *machine.Entry) int { return int(a.RequestedAt - b.RequestedAt) }
	slices.SortStableFunc(runnable, byAge)
	slices.SortStableFunc(running, byAge)
	return append(runnable, running...)
}

// settle claims e for Claude Code, which ran it, and reports how it went.
// It returns errTaken when e had moved on before: another hook settled it.
func settle(ctx context.Context, g Gate, in Input, opts Options, e *machine.Entry) error {
	if e.Status == machine.StateApproved || e.Status == machine.StateScheduled {
		if _, err := g.Started(ctx, e.PendingID, opts.Caller); errors.Is(err, machine.ErrConflict) {
			// Taken, or claimed by a hook that ran before and stopped:
			// the report below says which.
		} else if err != nil {
			return fmt.Errorf("claim %s: %w", e.PendingID, err)
		}
	}
	var err error
	if in.HookEventName == EventPostToolUseFailure {
		_, err = g.Fail(ctx, e.PendingID, opts.Caller, in.Error, 0)
	} else {
		result := in.ToolResponse
		if len(result) == 0 || !json.Valid(result) {
			result = nil
		}
		_, err = g.Succeed(ctx, e.PendingID, opts.Caller, result, 0)
	}
	if errors.Is(err, machine.ErrConflict) {
		return errTaken
	}
	return err
}

package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestDecideMatching_RacesAnAgentsCancels approves every pending
// web_search of a conversation (200 calls) while their agent cancels
// some. Every call is accounted for: approved by the batch exactly once
// (and listed so), skipped because its cancel came first (and listed
// so), or cancelled before the batch looked (and not matched); no call
// is approved that the answer does not list.
func TestDecideMatching_RacesAnAgentsCancels(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleApprover}}

	const calls = 200
	ids := make([]string, calls)
	for i := range ids {
		tool := "web_search"
		e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: fmt.Sprint(i), ToolName: tool, Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "batch"})
		require.NoError(t, err)
		ids[i] = e.PendingID
	}
	// Not matched: another tool, another conversation.
	other, err := g.Submit(ctx, bot, machine.Call{ToolCallID: "x", ToolName: "deploy", ConversationID: "batch"})
	require.NoError(t, err)
	elsewhere, err := g.Submit(ctx, bot, machine.Call{ToolCallID: "y", ToolName: "web_search", ConversationID: "other"})
	require.NoError(t, err)

	dry, err := g.DecideMatching(ctx, alice, wire.DecideMatchingRequest{Match: "web_search", ConversationID: "batch", Approved: true, DryRun: true})
	require.NoError(t, err)
	assert.True(t, dry.DryRun)
	assert.Len(t, dry.Decided, calls, "the dry run lists every match")
	for _, m := range dry.Decided {
		assert.Equal(t, machine.StatePendingApproval, m.Entry.Status, "and decides nothing")
	}

	var mu sync.Mutex
	cancelled := map[string]bool{}
	var reply *wire.DecideMatchingReply
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() (err error) {
		reply, err = g.DecideMatching(ectx, alice, wire.DecideMatchingRequest{Match: "web_search", ConversationID: "batch", Approved: true, Reason: "all of these"})
		return err
	})
	eg.Go(func() error {
		for i := calls - 1; i >= 0; i -= 3 { // from the end, to meet the batch halfway
			_, err := g.Cancel(ectx, bot, wire.CancelRequest{PendingID: ids[i], Reason: "changed my mind"})
			if err == nil {
				mu.Lock()
				cancelled[ids[i]] = true
				mu.Unlock()
			} else if !assert.ErrorIs(t, err, machine.ErrConflict) {
				return err
			}
		}
		return nil
	})
	require.NoError(t, eg.Wait())

	approved, listed := map[string]bool{}, map[string]bool{}
	for _, m := range reply.Decided {
		assert.False(t, listed[m.Entry.PendingID], "listed twice: %s", m.Entry.PendingID)
		approved[m.Entry.PendingID], listed[m.Entry.PendingID] = true, true
		assert.Equal(t, machine.StateApproved, m.Entry.Status, "as the approval left it")
	}
	for _, m := range reply.Skipped {
		assert.False(t, listed[m.Entry.PendingID], "listed twice: %s", m.Entry.PendingID)
		listed[m.Entry.PendingID] = true
		assert.Equal(t, "conflict", m.Code, m.Reason)
		assert.Equal(t, machine.StateCancelled, m.Entry.Status, "skipped as it is now: cancelled")
		assert.True(t, cancelled[m.Entry.PendingID], "%s skipped, yet the agent's cancel failed", m.Entry.PendingID)
	}
	// A call the answer does not list was cancelled before the batch
	// looked: it was no longer pending, so nothing matched it.
	for _, id := range ids {
		assert.True(t, listed[id] || cancelled[id], "%s neither listed nor cancelled", id)
	}
	// Each call was approved at most once, and exactly when the answer
	// says so; a cancel may follow an approval (the call had not started).
	for _, id := range ids {
		h, err := g.History(ctx, gate.System, wire.GetRequest{PendingID: id})
		require.NoError(t, err)
		approvals := 0
		for _, item := range h {
			if item.Event == machine.EventApprove {
				approvals++
			}
		}
		assert.Equal(t, map[bool]int{true: 1, false: 0}[approved[id]], approvals, "%s: %v", id, h)
	}
	for _, e := range []*machine.Entry{other, elsewhere} {
		got, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
		require.NoError(t, err)
		assert.Equal(t, machine.StatePendingApproval, got.Status, "%s was not matched", e.PendingID)
	}

	_, err = g.DecideMatching(ctx, bot, wire.DecideMatchingRequest{Match: "web_search", Approved: true})
	assert.ErrorIs(t, err, machine.ErrForbidden, "an agent decides nothing")
	_, err = g.DecideMatching(ctx, alice, wire.DecideMatchingRequest{Match: "Bash(", Approved: true})
	assert.ErrorIs(t, err, machine.ErrInvalid)
}

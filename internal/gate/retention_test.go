package gate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestRetention_FinishedCallsLeaveTheBucketAndAreStillRead: with a
// retention of a second, the timer moves each finished call (rejected,
// denied, run) out of tool_calls, revisions and all, into the archive;
// the call is still read by id (its receipts verifying), its history and
// in its conversation's list, and a dry-run of the window still replays
// it. An open call stays.
func TestRetention_FinishedCallsLeaveTheBucketAndAreStillRead(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{
		Roles:     []string{"relay", "intake", "timer"},
		Policy:    "default:\n  requiresApprovalTools: all\n  rules: {deny: [wipe]}\n",
		Configure: func(c *server.Config) { c.Retention = time.Second },
	})
	ctx := t.Context()
	_, bot := g.ConnectAs(t, "agent")
	_, approver := g.ConnectAs(t, "approver")
	_, viewer := g.ConnectAs(t, "viewer")
	submit := func(id, tool string) *machine.Entry {
		t.Helper()
		e, err := bot.Submit(ctx, machine.Call{ToolCallID: id, ToolName: tool, Arguments: json.RawMessage(`{"n":1}`), ConversationID: "retained"})
		require.NoError(t, err)
		return e
	}
	rejected := submit("rejected", "deploy")
	_, err := approver.Decide(ctx, wire.DecideRequest{PendingID: rejected.PendingID, Reason: "not today"})
	require.NoError(t, err)
	denied := submit("denied", "wipe")
	require.Equal(t, machine.StateRejectedByPolicy, denied.Status)
	ran := submit("ran", "deploy")
	_, err = approver.Decide(ctx, wire.DecideRequest{PendingID: ran.PendingID, Approved: true})
	require.NoError(t, err)
	_, err = bot.Started(ctx, ran.PendingID, "bot-run")
	require.NoError(t, err)
	_, err = bot.Succeed(ctx, ran.PendingID, "bot-run", json.RawMessage(`{"ok":true}`), 0)
	require.NoError(t, err)
	open := submit("open", "deploy")

	kv, err := g.JS.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	finished := []*machine.Entry{rejected, denied, ran}
	var left []string
	bustest.Eventually(t, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("the finished calls gone from %s", wire.CallsBucket), func() (bool, any) {
		left = nil
		for _, e := range finished {
			if _, err := kv.Get(ctx, e.PendingID); !errors.Is(err, jetstream.ErrKeyNotFound) {
				left = append(left, e.PendingID)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left)
	})
	_, err = kv.Get(ctx, open.PendingID)
	require.NoError(t, err, "an open call stays")
	for _, e := range finished {
		revs, err := kv.History(ctx, e.PendingID)
		require.NoError(t, err)
		require.Len(t, revs, 1, "%s: its revisions went with it", e.PendingID)
		assert.Equal(t, jetstream.KeyValuePurge, revs[0].Operation(), "only the purge's marker, which expires")
	}

	got, err := viewer.Get(ctx, ran.PendingID)
	require.NoError(t, err, "read by id from the archive")
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.JSONEq(t, `{"ok":true}`, string(got.Result))
	history, err := g.Service.History(ctx, gate.System, wire.GetRequest{PendingID: ran.PendingID})
	require.NoError(t, err)
	var events []machine.Event
	for _, h := range history {
		events = append(events, h.Event)
	}
	assert.Equal(t, []machine.Event{machine.EventAsk, machine.EventApprove, machine.EventStart, machine.EventSucceed}, events)
	keys, err := viewer.ReceiptKeys(ctx)
	require.NoError(t, err)
	chain, err := viewer.Receipts(ctx, ran.PendingID)
	require.NoError(t, err)
	_, err = client.VerifyReceiptChain(chain, keys.Keys)
	assert.NoError(t, err, "the receipts are archived with the entry")
	mine, err := bot.Get(ctx, rejected.PendingID)
	require.NoError(t, err, "the agent reads its own archived call")
	assert.Equal(t, machine.StateRejectedByUser, mine.Status)
	again, err := bot.Submit(ctx, machine.Call{ToolCallID: "ran", ToolName: "deploy", Arguments: json.RawMessage(`{"n":1}`), ConversationID: "retained"})
	require.NoError(t, err, "a retry of a retired call")
	assert.Equal(t, machine.StateCompletedSuccess, again.Status, "is that call, not one to run again")
	_, err = kv.Get(ctx, ran.PendingID)
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "nothing is written for it")
	_, err = bot.Submit(ctx, machine.Call{ToolCallID: "ran", ToolName: "deploy", Arguments: json.RawMessage(`{"n":2}`), ConversationID: "retained"})
	assert.ErrorIs(t, err, machine.ErrIdempotencyConflict, "its id reused for another call is refused, as before")

	entries, err := viewer.List(ctx, wire.ListRequest{ConversationID: "retained"})
	require.NoError(t, err)
	var listed []string
	for _, e := range entries {
		listed = append(listed, e.PendingID)
	}
	assert.ElementsMatch(t, []string{rejected.PendingID, denied.PendingID, ran.PendingID, open.PendingID}, listed, "a conversation lists its archived calls too")

	dry, err := viewer.PolicyDryRun(ctx, wire.PolicyDryRunRequest{Document: "default: {requiresApprovalTools: none}\n"})
	require.NoError(t, err)
	assert.Equal(t, 4, dry.Calls, "a dry-run replays the archived calls of its window")
}

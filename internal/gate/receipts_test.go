package gate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestReceipts_ChainVerifiesAndFailsWhereTheKVWasChanged: a call
// submitted by an agent, approved by an approver and run has a receipt
// for each step, signed with the key toolgate created in its data
// directory and publishes; the chain a viewer reads (arguments masked)
// verifies with it. A decision changed by writing the bucket directly
// fails verification at the exact receipt, and so does a forged key.
func TestReceipts_ChainVerifiesAndFailsWhereTheKVWasChanged(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default: {requiresApprovalTools: all}\n"})
	ctx := t.Context()
	_, bot := g.ConnectAs(t, "agent")
	_, approver := g.ConnectAs(t, "approver")
	_, viewer := g.ConnectAs(t, "viewer")

	keys, err := viewer.ReceiptKeys(ctx)
	require.NoError(t, err)
	require.NoError(t, client.ValidReceiptKey(keys.Key))
	assert.Equal(t, []string{keys.Key}, keys.Keys, "this process's key, registered")
	seed, err := readSeed(g.Data)
	require.NoError(t, err)
	info, err := os.Stat(filepath.Join(g.Data, "auth", "receipts.nk"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the seed is its owner's only")
	kp, err := nkeys.FromSeed(seed)
	require.NoError(t, err)
	pub, _ := kp.PublicKey()
	assert.Equal(t, pub, keys.Key, "the key is the data directory's")

	args := json.RawMessage(`{"url":"https://example.com","token":"sk-live-abcdefghijklmnopqrstuvwx"}`)
	e, err := bot.Submit(ctx, machine.Call{ToolCallID: "1", ToolName: "fetch", Arguments: args, ConversationID: "receipts"})
	require.NoError(t, err)
	_, err = approver.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, Reason: "looks fine"})
	require.NoError(t, err)
	_, err = bot.Started(ctx, e.PendingID, "bot-run")
	require.NoError(t, err)
	_, err = bot.Succeed(ctx, e.PendingID, "bot-run", json.RawMessage(`{"status":200}`), 0.1)
	require.NoError(t, err)

	chain, err := viewer.Receipts(ctx, e.PendingID)
	require.NoError(t, err)
	assert.True(t, chain.ArgumentsMasked, "a viewer is shown the token masked")
	assert.NotContains(t, string(chain.Entry.ToolArguments), "sk-live")
	require.Len(t, chain.Receipts, 4)
	assert.Equal(t, "approver", chain.Receipts[1].Actor, "the approver's authenticated name")
	signers, err := client.VerifyReceiptChain(chain, keys.Keys)
	require.NoError(t, err)
	assert.Equal(t, []string{keys.Key}, signers)
	// The events of the call carry its chain, a receipt each, and leave
	// the entry's receipts out.
	var fromEvents []machine.Receipt
	bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, fmt.Sprintf("the events carry the %d receipts", len(chain.Receipts)), func() (bool, any) {
		fromEvents = nil
		st, err := g.JS.Stream(ctx, wire.EventsStream)
		if err != nil {
			return false, err
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return false, err
		}
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return false, err
		}
		for msg := range batch.Messages() {
			var ev wire.Event
			require.NoError(t, json.Unmarshal(msg.Data(), &ev))
			if ev.Entry.PendingID == e.PendingID {
				assert.Empty(t, ev.Entry.Receipts, "an event's entry leaves its receipts out")
				require.NotNil(t, ev.Receipt, ev.ID)
				fromEvents = append(fromEvents, *ev.Receipt)
			}
		}
		return len(fromEvents) == len(chain.Receipts), fmt.Sprintf("%d receipts", len(fromEvents))
	})
	assert.Equal(t, chain.Receipts, fromEvents, "the events rebuild the chain")
	own, err := bot.Receipts(ctx, e.PendingID)
	require.NoError(t, err)
	assert.False(t, own.ArgumentsMasked, "the agent sees its own arguments")
	_, err = client.VerifyReceiptChain(own, keys.Keys)
	require.NoError(t, err)

	// A rejection, then the bucket written directly: the decision turned
	// into an approval.
	r, err := bot.Submit(ctx, machine.Call{ToolCallID: "2", ToolName: "fetch", Arguments: args, ConversationID: "receipts"})
	require.NoError(t, err)
	_, err = approver.Decide(ctx, wire.DecideRequest{PendingID: r.PendingID, Reason: "not today"})
	require.NoError(t, err)
	kv, err := g.JS.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	rewrite := func(change func(e *machine.Entry)) {
		t.Helper()
		kve, err := kv.Get(ctx, r.PendingID)
		require.NoError(t, err)
		var stored machine.Entry
		require.NoError(t, json.Unmarshal(kve.Value(), &stored))
		change(&stored)
		data, err := json.Marshal(&stored)
		require.NoError(t, err)
		_, err = kv.Update(ctx, r.PendingID, data, kve.Revision())
		require.NoError(t, err)
	}
	verifyErr := func() *machine.ReceiptError {
		t.Helper()
		chain, err := viewer.Receipts(ctx, r.PendingID)
		require.NoError(t, err)
		_, err = client.VerifyReceiptChain(chain, keys.Keys)
		var re *machine.ReceiptError
		require.True(t, errors.As(err, &re), "want a ReceiptError, got %v", err)
		return re
	}
	chain, err = viewer.Receipts(ctx, r.PendingID)
	require.NoError(t, err)
	_, err = client.VerifyReceiptChain(chain, keys.Keys)
	require.NoError(t, err, "as toolgate wrote it")

	rewrite(func(e *machine.Entry) { e.Status = machine.StateApproved })
	re := verifyErr()
	assert.Equal(t, 0, re.Seq)
	assert.Equal(t, 2, re.Receipt.Seq)
	assert.Contains(t, re.Error(), "entry: status is APPROVED_READY_FOR_EXECUTION, but the last receipt, receipt 2 (reject by approver at ")
	assert.Contains(t, re.Error(), "records REJECTED_BY_USER")

	rewrite(func(e *machine.Entry) {
		e.Receipts[1].Event, e.Receipts[1].To = machine.EventApprove, machine.StateApproved
	})
	re = verifyErr()
	assert.Equal(t, 2, re.Seq)
	assert.Contains(t, re.Error(), "receipt 2 (approve by approver at ")
	assert.Contains(t, re.Error(), "signature does not verify")

	// A key that is not toolgate's.
	other, err := nkeys.CreateServer()
	require.NoError(t, err)
	otherPub, _ := other.PublicKey()
	_, err = client.VerifyReceiptChain(chain, []string{otherPub})
	assert.ErrorContains(t, err, "receipt 1 (ask by policy at ")
	assert.ErrorContains(t, err, "not a trusted key")
	_, err = client.VerifyReceiptChain(chain, []string{"not-a-key"})
	assert.ErrorContains(t, err, `"not-a-key" is not a receipt key`)
}

// readSeed reads the receipt key toolgate created in its data directory.
func readSeed(data string) ([]byte, error) {
	seed, err := os.ReadFile(filepath.Join(data, "auth", "receipts.nk"))
	return bytes.TrimSpace(seed), err
}

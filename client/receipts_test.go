package client_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestVerifyReceiptChain_OfflineOverWhatTheSDKFetches: a chain the SDK
// fetched verifies against the keys toolgate publishes, with nothing
// but the chain and the keys; an entry changed afterwards, a chain of
// another call's entry, or a trusted key that is none fail, saying why.
func TestVerifyReceiptChain_OfflineOverWhatTheSDKFetches(t *testing.T) {
	t.Parallel()
	g := startGate(t, "default: {approvers: [alice]}")
	ctx := t.Context()
	e, err := g.c.Submit(ctx, bash("c1", "t1", "make deploy"))
	require.NoError(t, err)
	_, err = g.c.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	chain, err := g.c.Receipts(ctx, e.PendingID)
	require.NoError(t, err)
	keys, err := g.c.ReceiptKeys(ctx)
	require.NoError(t, err)
	require.NoError(t, client.ValidReceiptKey(keys.Key))

	signers, err := client.VerifyReceiptChain(chain, keys.Keys)
	require.NoError(t, err)
	assert.Equal(t, []string{keys.Key}, signers)
	require.Len(t, chain.Receipts, 2, "ask, approve")

	changed := *chain
	entry := *chain.Entry
	entry.Status = machine.StateRejectedByUser
	changed.Entry = &entry
	_, err = client.VerifyReceiptChain(&changed, keys.Keys)
	assert.ErrorContains(t, err, "status is REJECTED_BY_USER, but the last receipt")

	changed.Entry = &machine.Entry{PendingID: "c1.other"}
	_, err = client.VerifyReceiptChain(&changed, keys.Keys)
	assert.ErrorContains(t, err, "the chain is of c1.t1, its entry of c1.other")

	changed.Entry = nil
	_, err = client.VerifyReceiptChain(&changed, keys.Keys)
	assert.ErrorContains(t, err, "no entry: not a receipt chain")

	_, err = client.VerifyReceiptChain(chain, []string{"UABC"})
	assert.ErrorContains(t, err, `"UABC" is not a receipt key`)
	assert.Error(t, client.ValidReceiptKey(""))
}

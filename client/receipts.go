package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// Receipts returns a call's signed receipt chain and the entry it is
// checked against (docs/receipts.md).
func (c *Client) Receipts(ctx context.Context, pendingID string) (*wire.ReceiptChain, error) {
	var ch wire.ReceiptChain
	if err := c.request(ctx, wire.EndpointReceipts, wire.GetRequest{PendingID: pendingID}, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}

// ReceiptKeys returns toolgate's public receipt keys: the answering
// process's, and every one registered.
func (c *Client) ReceiptKeys(ctx context.Context) (*wire.ReceiptKeys, error) {
	var k wire.ReceiptKeys
	if err := c.request(ctx, wire.EndpointReceiptsKey, wire.ReceiptKeysRequest{}, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

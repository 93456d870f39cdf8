package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/machine"
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

// ValidReceiptKey says what is wrong with key as a receipt key, if
// anything. A receipt key is an nkey with the server prefix (its public
// key starts with N): an Ed25519 key whose encoding says what it is for
// and carries a checksum.
func ValidReceiptKey(key string) error {
	if !nkeys.IsValidPublicServerKey(key) {
		return fmt.Errorf("%q is not a receipt key: a server nkey's public key (56 characters, starting with N)", key)
	}
	return nil
}

// VerifyReceiptChain checks ch offline, as `toolgate verify` does: its
// receipts, each signed by one of trusted and naming the one before by
// its hash, and its entry against them (machine.VerifyReceipts). It
// returns the keys that signed.
func VerifyReceiptChain(ch *wire.ReceiptChain, trusted []string) ([]string, error) {
	if ch.Entry == nil {
		return nil, errors.New("no entry: not a receipt chain (toolgate receipt ID --json writes one)")
	}
	if ch.PendingID != ch.Entry.PendingID {
		return nil, fmt.Errorf("the chain is of %s, its entry of %s", ch.PendingID, ch.Entry.PendingID)
	}
	for _, k := range trusted {
		if err := ValidReceiptKey(k); err != nil {
			return nil, err
		}
	}
	e := *ch.Entry
	e.Receipts = ch.Receipts
	return machine.VerifyReceipts(&e, machine.ReceiptCheck{Verify: verifyReceiptSignature, Trusted: trusted, ArgumentsMasked: ch.ArgumentsMasked})
}

// verifyReceiptSignature reports whether sig is the Ed25519 signature of
// msg by key, a server nkey's public key.
func verifyReceiptSignature(key string, msg, sig []byte) bool {
	if !nkeys.IsValidPublicServerKey(key) {
		return false
	}
	kp, err := nkeys.FromPublicKey(key)
	return err == nil && kp.Verify(msg, sig) == nil
}

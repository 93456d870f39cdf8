package wire

import "github.com/toolgate/toolgate/machine"

// Signed receipts (docs/receipts.md): every transition of an entry appends
// a receipt signed with the writing toolgate's receipt key.
const (
	// EndpointReceipts answers a call's receipt chain (ReceiptChain), to
	// whoever may read the call.
	EndpointReceipts = "receipts"
	// EndpointReceiptsKey answers the receipt keys (ReceiptKeys), to
	// every role: public keys are public.
	EndpointReceiptsKey = "receipts_key"

	// ReceiptKeysBucket holds the public receipt keys of the toolgate
	// processes that sign receipts, by key (a ReceiptKey each).
	ReceiptKeysBucket = "tool_receipt_keys"
)

// ReceiptChain is what verifying a call's receipts needs, as
// `toolgate receipt ID --json` writes it and `toolgate verify FILE` reads
// it: the receipts, and the entry they are checked against.
type ReceiptChain struct {
	PendingID string            `json:"pendingId"`
	Receipts  []machine.Receipt `json:"receipts"`
	// Entry is the call as its reader was shown it, without its receipts
	// (they are above).
	Entry *machine.Entry `json:"entry"`
	// ArgumentsMasked says the entry's arguments are shown with their
	// secrets masked: they are checked against the receipts by their
	// digest (argumentsDigest) only.
	ArgumentsMasked bool `json:"argumentsMasked,omitempty"`
}

// ReceiptKeys are the public receipt keys: the answering process's, and
// every one registered (each toolgate process signs with its own).
type ReceiptKeys struct {
	Key  string   `json:"key"`
	Keys []string `json:"keys"`
}

// ReceiptKey is a registered receipt key: a value of ReceiptKeysBucket.
type ReceiptKey struct {
	Key string `json:"key"`
	// RegisteredAt is when a process first signed with it, in epoch
	// milliseconds.
	RegisteredAt int64 `json:"registeredAt"`
}

// ReceiptKeysRequest asks for the receipt keys; it has no fields.
type ReceiptKeysRequest struct{}

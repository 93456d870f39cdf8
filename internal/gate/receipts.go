package gate

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// A receipt key is an nkey with the server prefix (its public key starts
// with N): an Ed25519 key whose encoding says what it is for and carries
// a checksum. It is no operator, account or user key, so nothing of the
// NATS trust chain would take a JWT signed with it, nor a receipt for a
// credential.

// ReceiptSigner is kp as the machine signs receipts with it. kp must be a
// server nkey.
func ReceiptSigner(kp nkeys.KeyPair) (machine.Signer, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicServerKey(pub) {
		return nil, fmt.Errorf("receipt key %s: not a server nkey (N…)", pub)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, err
	}
	// The private key derived once: an nkey derives it from its seed at
	// every signature, which doubles the cost of each.
	return nkeySigner{priv: ed25519.NewKeyFromSeed(raw), pub: pub}, nil
}

type nkeySigner struct {
	priv ed25519.PrivateKey
	pub  string
}

func (s nkeySigner) PublicKey() string               { return s.pub }
func (s nkeySigner) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.priv, msg), nil }

// Receipts returns a call's receipt chain, to whoever may read the call
// (an agent only its own): the receipts, and the entry as the reader may
// see it. Receipts hold digests only, so a reader shown masked arguments
// still verifies the chain: by the arguments' digest.
func (s *Service) Receipts(ctx context.Context, a Actor, r wire.GetRequest) (*wire.ReceiptChain, error) {
	if r.PendingID == "" {
		return nil, fmt.Errorf("%w: pendingId: required", machine.ErrInvalid)
	}
	e, _, err := s.read(ctx, a, r.PendingID)
	if err != nil {
		return nil, err
	}
	receipts := e.Receipts
	if receipts == nil {
		receipts = []machine.Receipt{}
	}
	shown := s.shown(a, e)
	return &wire.ReceiptChain{PendingID: e.PendingID, Receipts: receipts, Entry: shown, ArgumentsMasked: masked(a, shown, receipts)}, nil
}

// masked reports whether the arguments of e, as a is shown them, had
// secrets masked: they no longer match the digests recorded of them.
func masked(a Actor, e *machine.Entry, receipts []machine.Receipt) bool {
	if a.seesSecrets(e) {
		return false
	}
	if machine.ArgumentsDigest(e.ToolArguments) != e.ArgumentsDigest {
		return true
	}
	return len(e.OriginalArguments) > 0 && len(receipts) > 0 && machine.ArgumentsDigest(e.OriginalArguments) != receipts[0].ArgumentsDigest
}

// ReceiptKeys returns this process's receipt key and every one
// registered. Anyone may ask: they are public keys.
func (s *Service) ReceiptKeys(ctx context.Context, _ Actor, _ wire.ReceiptKeysRequest) (*wire.ReceiptKeys, error) {
	keys, err := s.receiptKeys.Keys(ctx)
	if err != nil {
		return nil, err
	}
	out := &wire.ReceiptKeys{Keys: keys}
	if s.signer != nil {
		out.Key = s.signer.PublicKey()
	}
	return out, nil
}

// newReceiptKeyStore is the store of the published receipt keys.
func newReceiptKeyStore(b *bus.Buckets) *stores.ReceiptKeyStore {
	return stores.NewReceiptKeyStore(b.ReceiptKeys)
}

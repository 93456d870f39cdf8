package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/wire"
)

// ReceiptKeyStore records the public receipt keys of the toolgate
// processes that sign receipts, so that a verifier can ask for all of
// them.
type ReceiptKeyStore struct {
	kv jetstream.KeyValue
}

// NewReceiptKeyStore returns the store over the receipt keys' bucket.
func NewReceiptKeyStore(kv jetstream.KeyValue) *ReceiptKeyStore { return &ReceiptKeyStore{kv: kv} }

// Register records key as registered at; one recorded already is left as
// it is.
func (s *ReceiptKeyStore) Register(ctx context.Context, key string, at time.Time) error {
	data, err := json.Marshal(wire.ReceiptKey{Key: key, RegisteredAt: at.UnixMilli()})
	if err != nil {
		return err
	}
	_, err = jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (uint64, error) {
		return s.kv.Create(ctx, key, data)
	})
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("receipt key %s: %w", key, err)
	}
	return nil
}

// Keys returns every key registered, sorted.
func (s *ReceiptKeyStore) Keys(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("receipt keys: %w", err)
	}
	keys := []string{}
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

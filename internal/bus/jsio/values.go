package jsio

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// WatchValues reads the current value of every key matching filter: a
// watch that ends once its initial values are in.
func WatchValues[T any](ctx context.Context, kv jetstream.KeyValue, filter string, decode func([]byte) (T, error)) ([]T, error) {
	w, err := kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var values []T
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case kve := <-w.Updates():
			if kve == nil { // the initial values are all in
				return values, nil
			}
			v, err := decode(kve.Value())
			if err != nil {
				return nil, fmt.Errorf("key %s: %w", kve.Key(), err)
			}
			values = append(values, v)
		}
	}
}

// DecodeEntry decodes an entry as stored, with json/v2 when it can
// (wire.Unmarshal; BenchmarkDecodeEntry). The store's reads, the index's
// pages and the relay decode with it.
func DecodeEntry(data []byte) (*machine.Entry, error) {
	var e machine.Entry
	if err := wire.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("decode entry: %w", err)
	}
	return &e, nil
}

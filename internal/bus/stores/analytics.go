package stores

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// AnalyticsStore is the analytics' bucket (wire.AnalyticsBucket), in
// which every process that runs the analytics changes the same
// aggregates by compare-and-set.
type AnalyticsStore struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// NewAnalyticsStore returns the store over kv, the analytics' bucket.
func NewAnalyticsStore(js jetstream.JetStream, kv jetstream.KeyValue) *AnalyticsStore {
	return &AnalyticsStore{js: js, kv: kv}
}

// Get returns the value under key and its revision:
// machine.ErrNotFound when there is none.
func (s *AnalyticsStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	kve, err := jsio.Get(ctx, s.kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%s %s: %w", wire.AnalyticsBucket, key, machine.ErrNotFound)
	} else if err != nil {
		return nil, 0, err
	}
	return kve.Value(), kve.Revision(), nil
}

// Update changes the value under key by compare-and-set, through the one
// loop of every read-modify-write of the stores (jsio.Update: a write whose answer
// was lost is not taken for another's, a stream leader lost is asked
// again, a full store is reported as wire.ErrStorageFull). f is given the
// key's value and revision (nil and 0: none) and returns what to store
// instead, or nil to leave it; Update returns the revision written, 0
// when f left it. held, when not nil, is the revision of the value the
// caller holds (0: it holds the key absent): the first f is then given a
// nil value at that revision, and changes the value the caller holds,
// with no read; only after another write came first is the key read.
//
// Two writers that store the same bytes must want the same outcome
// (see jsio.Write): an aggregate that records the sequences it has taken in
// does.
func (s *AnalyticsStore) Update(ctx context.Context, key string, held *uint64, f func(value []byte, revision uint64) ([]byte, error)) (uint64, error) {
	return jsio.UpdateHeld(ctx, s.js, s.kv, key, held, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur == nil {
			return f(nil, 0)
		}
		return f(cur.Value(), cur.Revision())
	})
}

// Watch sends the value of every put of key from now on, until ctx ends
// or the watch does: then the channel is closed.
func (s *AnalyticsStore) Watch(ctx context.Context, key string) (<-chan []byte, error) {
	w, err := s.kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	values := make(chan []byte)
	go func() {
		defer close(values)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case kve, ok := <-w.Updates():
				if !ok {
					return
				}
				if kve == nil || kve.Operation() != jetstream.KeyValuePut {
					continue
				}
				select {
				case values <- kve.Value():
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return values, nil
}

// Values calls fn with every key that one of filters (subjects under the
// bucket, with wildcards) matches, and its value: one request, however
// many keys.
func (s *AnalyticsStore) Values(ctx context.Context, filters []string, fn func(key string, value []byte) error) error {
	w, err := s.kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		var kve jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return ctx.Err()
		case kve = <-w.Updates():
		}
		if kve == nil {
			return nil // every value there was has come
		}
		if err := fn(kve.Key(), kve.Value()); err != nil {
			return err
		}
	}
}

// Keys returns every key of the bucket.
func (s *AnalyticsStore) Keys(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("list %s: %w", wire.AnalyticsBucket, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// Purge removes every key under prefix, and their history.
func (s *AnalyticsStore) Purge(ctx context.Context, prefix string) error {
	bucket := s.kv.Bucket()
	st, err := s.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+bucket+"."+prefix+">"))
}

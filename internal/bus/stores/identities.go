package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// IdentityStore records the credentials toolgate issued, one value per
// public key, so that a revoked one is known to every process.
type IdentityStore struct {
	js jetstream.JetStream
	kv jetstream.KeyValue

	mu sync.Mutex
	// live caches the keys found not revoked, and when: every request a
	// credential makes asks, and one read a second per key is plenty.
	live map[string]time.Time
}

// liveFor is how long a key found not revoked is taken as such: how long
// a revocation may take to reach a process's request API.
const liveFor = time.Second

// NewIdentityStore returns the store over the identities bucket, kv of
// js.
func NewIdentityStore(js jetstream.JetStream, kv jetstream.KeyValue) *IdentityStore {
	return &IdentityStore{js: js, kv: kv, live: map[string]time.Time{}}
}

// Add records a credential; one already recorded is left as it is.
func (s *IdentityStore) Add(ctx context.Context, id wire.Identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	if _, err := s.kv.Create(ctx, id.Key, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("identity %s: %w", id.Name, err)
	}
	return nil
}

// List returns every credential recorded, revoked ones too.
func (s *IdentityStore) List(ctx context.Context) ([]wire.Identity, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []wire.Identity
	for key := range lister.Keys() {
		id, err := s.get(ctx, key)
		if errors.Is(err, machine.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

func (s *IdentityStore) get(ctx context.Context, key string) (wire.Identity, error) {
	kve, err := jsio.Get(ctx, s.kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Identity{}, machine.ErrNotFound
	}
	if err != nil {
		return wire.Identity{}, err
	}
	return identityIn(key, kve)
}

// identityIn is the credential kve, key's entry, records; none (nil) is
// machine.ErrNotFound.
func identityIn(key string, kve jetstream.KeyValueEntry) (wire.Identity, error) {
	if kve == nil {
		return wire.Identity{}, machine.ErrNotFound
	}
	var id wire.Identity
	if err := json.Unmarshal(kve.Value(), &id); err != nil {
		return wire.Identity{}, fmt.Errorf("identity %s: %w", key, err)
	}
	return id, nil
}

// Revoked reports whether the credential with public key key was revoked.
// A key never recorded is not: toolgate's own, say.
func (s *IdentityStore) Revoked(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	checked, ok := s.live[key]
	s.mu.Unlock()
	if ok && time.Since(checked) < liveFor {
		return false, nil
	}
	id, err := s.get(ctx, key)
	if errors.Is(err, machine.ErrNotFound) {
		err = nil
	}
	if err != nil || id.RevokedAt != 0 {
		return id.RevokedAt != 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) > 10000 {
		clear(s.live) // bounded: a forgotten key is read again
	}
	s.live[key] = time.Now()
	return false, nil
}

// Revoke marks a credential revoked, by compare-and-set (see jsio.Update):
// revoked once, by whoever came first. It returns the identity as it is
// now.
func (s *IdentityStore) Revoke(ctx context.Context, key, by string, at int64) (wire.Identity, error) {
	var id wire.Identity
	_, err := jsio.Update(ctx, s.js, s.kv, key, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		var err error
		if id, err = identityIn(key, cur); err != nil || id.RevokedAt != 0 {
			return nil, err
		}
		id.RevokedAt, id.RevokedBy = at, by
		return json.Marshal(id)
	})
	return id, err
}

// RevokedKeys lists the public keys of every revoked credential.
func (s *IdentityStore) RevokedKeys(ctx context.Context) ([]string, error) {
	ids, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, id := range ids {
		if id.RevokedAt != 0 {
			keys = append(keys, id.Key)
		}
	}
	return keys, nil
}

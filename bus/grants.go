package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// GrantStore keeps the session grants of each conversation in one KV value
// under the conversation's key, a list changed by compare-and-set. So
// matching a call against its conversation's grants is one read, on every
// submit, where a watch over a key per grant created a JetStream consumer
// per submit.
//
// A store that Follows the bucket answers Match from memory, kept current
// by one watch, so that a submit reads nothing: while the bucket is slow
// or out of reach (a leader election), submits still match their grants.
type GrantStore struct {
	kv jetstream.KeyValue

	mu sync.RWMutex
	// byKey holds every conversation's grants, by conversation key, while
	// synced: Follow has read the bucket and is watching it.
	byKey  map[string][]policy.Grant
	synced bool
}

var _ policy.Grants = (*GrantStore)(nil)

// NewGrantStore returns the store over the grants bucket.
func NewGrantStore(kv jetstream.KeyValue) *GrantStore { return &GrantStore{kv: kv} }

// Follow keeps the store's copy of the bucket current until ctx ends,
// watching it again after a failure; meanwhile Match reads the bucket.
func (s *GrantStore) Follow(ctx context.Context, log *slog.Logger) error {
	defer s.unsync()
	return consumer.RunRestarting(ctx, log, "grants", func(ctx context.Context) error {
		defer s.unsync()
		w, err := s.kv.WatchAll(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop() }()
		byKey := map[string][]policy.Grant{}
		for {
			select {
			case <-ctx.Done():
				return nil
			case kve, ok := <-w.Updates():
				if !ok {
					return errors.New("grants: watch ended")
				}
				if kve == nil { // the bucket as it was: read
					s.mu.Lock()
					s.byKey, s.synced = byKey, true
					s.mu.Unlock()
					continue
				}
				var grants []policy.Grant
				if kve.Operation() == jetstream.KeyValuePut {
					if err := json.Unmarshal(kve.Value(), &grants); err != nil {
						log.Warn("grants: unreadable value, ignored", "key", kve.Key(), "revision", kve.Revision(), "err", err)
						continue
					}
				}
				s.mu.Lock()
				byKey[kve.Key()] = grants
				s.mu.Unlock()
			}
		}
	})
}

func (s *GrantStore) unsync() {
	s.mu.Lock()
	s.byKey, s.synced = nil, false
	s.mu.Unlock()
}

// cached returns a conversation's grants from memory, and false when the
// store is not following the bucket.
func (s *GrantStore) cached(conversationID string) ([]policy.Grant, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byKey[machine.ConversationKey(conversationID)], s.synced
}

// remember puts a conversation's grants as this process wrote them in
// memory at once, so that its next submit matches them without waiting
// for the watch.
func (s *GrantStore) remember(conversationID string, grants []policy.Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced {
		s.byKey[machine.ConversationKey(conversationID)] = grants
	}
}

// Add stores a session grant.
func (s *GrantStore) Add(ctx context.Context, g policy.Grant) (policy.Grant, error) {
	if g.ConversationID == "" {
		return g, fmt.Errorf("%w: grant: conversationId: required for a session grant", machine.ErrInvalid)
	}
	if err := g.Validate(); err != nil {
		return g, err
	}
	if g.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		g.ID = hex.EncodeToString(b[:])
	}
	key := machine.ConversationKey(g.ConversationID)
	for {
		grants, rev, err := s.list(ctx, g.ConversationID)
		if err != nil {
			return g, err
		}
		grants = append(grants, g)
		data, err := json.Marshal(grants)
		if err != nil {
			return g, err
		}
		_, err = write(ctx, s.kv, key, data, rev)
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another grant of the conversation came first
		}
		if err == nil {
			s.remember(g.ConversationID, grants)
		}
		return g, err
	}
}

// List returns a conversation's grants.
func (s *GrantStore) List(ctx context.Context, conversationID string) ([]policy.Grant, error) {
	grants, _, err := s.list(ctx, conversationID)
	return grants, err
}

func (s *GrantStore) list(ctx context.Context, conversationID string) ([]policy.Grant, uint64, error) {
	kve, err := get(ctx, s.kv, machine.ConversationKey(conversationID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	} else if err != nil {
		return nil, 0, err
	}
	var grants []policy.Grant
	if err := json.Unmarshal(kve.Value(), &grants); err != nil {
		return nil, 0, fmt.Errorf("grants of %s (revision %d): %w", conversationID, kve.Revision(), err)
	}
	return grants, kve.Revision(), nil
}

// Match implements policy.Grants: from memory while the store follows
// the bucket, else from the bucket.
func (s *GrantStore) Match(ctx context.Context, c machine.Call) (policy.Grant, bool, error) {
	grants, ok := s.cached(c.ConversationID)
	if !ok {
		var err error
		if grants, err = s.List(ctx, c.ConversationID); err != nil {
			return policy.Grant{}, false, err
		}
	}
	for _, g := range grants {
		if g.Allows(c) {
			return g, true, nil
		}
	}
	return policy.Grant{}, false, nil
}

package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// GrantStore keeps the session grants of each conversation in one KV value
// under the conversation's key, a list changed by compare-and-set. So
// matching a call against its conversation's grants is one read, on every
// submit, where a watch over a key per grant created a JetStream consumer
// per submit.
type GrantStore struct {
	kv jetstream.KeyValue
}

var _ policy.Grants = (*GrantStore)(nil)

// NewGrantStore returns the store over the grants bucket.
func NewGrantStore(kv jetstream.KeyValue) *GrantStore { return &GrantStore{kv: kv} }

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
		data, err := json.Marshal(append(grants, g))
		if err != nil {
			return g, err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another grant of the conversation came first
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
	kve, err := s.kv.Get(ctx, machine.ConversationKey(conversationID))
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

// Match implements policy.Grants.
func (s *GrantStore) Match(ctx context.Context, c machine.Call) (policy.Grant, bool, error) {
	grants, err := s.List(ctx, c.ConversationID)
	if err != nil {
		return policy.Grant{}, false, err
	}
	for _, g := range grants {
		if g.Allows(c) {
			return g, true, nil
		}
	}
	return policy.Grant{}, false, nil
}

package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// GrantStore keeps session grants in KV under <conversation>.<id>, so the
// grants of one conversation are read without reading any other's.
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
	data, err := json.Marshal(g)
	if err != nil {
		return g, err
	}
	_, err = s.kv.Put(ctx, machine.ConversationKey(g.ConversationID)+"."+machine.KeyToken(g.ID), data)
	return g, err
}

// List returns a conversation's grants.
func (s *GrantStore) List(ctx context.Context, conversationID string) ([]policy.Grant, error) {
	return watchValues(ctx, s.kv, machine.ConversationKey(conversationID)+".*", func(data []byte) (policy.Grant, error) {
		var g policy.Grant
		err := json.Unmarshal(data, &g)
		return g, err
	})
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

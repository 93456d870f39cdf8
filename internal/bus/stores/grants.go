package stores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// GrantStore keeps the grants of each conversation (session and task
// grants) in one KV value under the conversation's key, and the "always"
// grants in one more, each a list changed by compare-and-set. So
// matching a call against its conversation's grants is one read, on every
// submit, where a watch over a key per grant created a JetStream consumer
// per submit.
//
// A store that Follows the bucket answers Match from memory, kept current
// by one watch, so that a submit reads nothing: while the bucket is slow
// or out of reach (a leader election), submits still match their grants.
type GrantStore struct {
	js jetstream.JetStream
	kv jetstream.KeyValue

	mu sync.RWMutex
	// byKey holds every conversation's grants, by conversation key, while
	// synced: Follow has read the bucket and is watching it.
	byKey  map[string][]policy.Grant
	synced bool
}

var _ policy.Grants = (*GrantStore)(nil)

// NewGrantStore returns the store over the grants bucket.
func NewGrantStore(js jetstream.JetStream, kv jetstream.KeyValue) *GrantStore {
	return &GrantStore{js: js, kv: kv}
}

// Follow keeps the store's copy of the bucket current until ctx ends,
// watching it again after a failure; meanwhile Match reads the bucket.
func (s *GrantStore) Follow(ctx context.Context, log *slog.Logger) error {
	return jsio.FollowBucket(ctx, log, "grants", s.js, s.kv, s.unsync, func() (func(jetstream.KeyValueEntry), func()) {
		byKey := map[string][]policy.Grant{}
		apply := func(kve jetstream.KeyValueEntry) {
			var grants []policy.Grant
			if kve.Operation() == jetstream.KeyValuePut {
				if err := json.Unmarshal(kve.Value(), &grants); err != nil {
					log.Warn("grants: unreadable value, ignored", "key", kve.Key(), "revision", kve.Revision(), "err", err)
					return
				}
			}
			s.mu.Lock()
			byKey[kve.Key()] = grants
			s.mu.Unlock()
		}
		loaded := func() {
			s.mu.Lock()
			s.byKey, s.synced = byKey, true
			s.mu.Unlock()
		}
		return apply, loaded
	})
}

func (s *GrantStore) unsync() {
	s.mu.Lock()
	s.byKey, s.synced = nil, false
	s.mu.Unlock()
}

// alwaysKey holds the "always allow" grants, which belong to no
// conversation: two tokens, so no conversation's key (one token) is it.
const alwaysKey = "_toolgate.always"

// grantKey is the key a grant is kept under.
func grantKey(conversationID string) string {
	if conversationID == "" {
		return alwaysKey
	}
	return machine.ConversationKey(conversationID)
}

// cached returns the grants under key from memory, and false when the
// store is not following the bucket.
func (s *GrantStore) cached(key string) ([]policy.Grant, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byKey[key], s.synced
}

// remember puts the grants under key as this process wrote them in
// memory at once, so that its next submit matches them without waiting
// for the watch.
func (s *GrantStore) remember(key string, grants []policy.Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced {
		s.byKey[key] = grants
	}
}

// Add stores a grant: a session grant under its conversation, an
// "always" one (no conversation) with the others. Grants of the same key
// that have expired by now are dropped.
func (s *GrantStore) Add(ctx context.Context, g policy.Grant, now time.Time) (policy.Grant, error) {
	if err := g.Validate(); err != nil {
		return g, err
	}
	if g.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		g.ID = hex.EncodeToString(b[:])
	}
	key := grantKey(g.ConversationID)
	err := s.change(ctx, key, func(grants []policy.Grant) ([]policy.Grant, error) {
		live := slices.DeleteFunc(grants, func(o policy.Grant) bool { return !o.Live(now) })
		// The same approval recorded again (its decision sent again after
		// the answer was lost) keeps the grant it recorded.
		if i := slices.IndexFunc(live, func(o policy.Grant) bool {
			return g.PendingID != "" && o.PendingID == g.PendingID && o.Pattern == g.Pattern
		}); i >= 0 {
			g = live[i]
			return live, nil
		}
		return append(live, g), nil
	})
	return g, err
}

// Revoke removes the grant id, wherever it is kept, and returns it. It
// takes effect on every process that follows the bucket as soon as its
// watch hears of it.
func (s *GrantStore) Revoke(ctx context.Context, id string) (policy.Grant, error) {
	all, err := s.All(ctx)
	if err != nil {
		return policy.Grant{}, err
	}
	i := slices.IndexFunc(all, func(g policy.Grant) bool { return g.ID == id })
	if i < 0 {
		return policy.Grant{}, fmt.Errorf("grant %q: %w", id, machine.ErrNotFound)
	}
	g := all[i]
	err = s.change(ctx, grantKey(g.ConversationID), func(grants []policy.Grant) ([]policy.Grant, error) {
		n := len(grants)
		grants = slices.DeleteFunc(grants, func(o policy.Grant) bool { return o.ID == id })
		if len(grants) == n {
			return nil, fmt.Errorf("grant %q: %w", id, machine.ErrNotFound) // revoked meanwhile
		}
		return grants, nil
	})
	return g, err
}

// change replaces the grants under key with what f makes of them, by
// compare-and-set (see jsio.Update), reading again when another change came
// first.
func (s *GrantStore) change(ctx context.Context, key string, f func([]policy.Grant) ([]policy.Grant, error)) error {
	var grants []policy.Grant
	_, err := jsio.Update(ctx, s.js, s.kv, key, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		var err error
		if grants, err = grantsIn(cur); err != nil {
			return nil, err
		}
		if grants, err = f(grants); err != nil {
			return nil, err
		}
		return json.Marshal(grants)
	})
	if err == nil {
		s.remember(key, grants)
	}
	return err
}

// List returns a conversation's grants (its session grants), or with no
// conversation the "always" grants.
func (s *GrantStore) List(ctx context.Context, conversationID string) ([]policy.Grant, error) {
	return s.read(ctx, grantKey(conversationID))
}

// All returns every grant: from memory while the store follows the
// bucket, else from the bucket.
func (s *GrantStore) All(ctx context.Context) ([]policy.Grant, error) {
	s.mu.RLock()
	if s.synced {
		var all []policy.Grant
		for _, grants := range s.byKey {
			all = append(all, grants...)
		}
		s.mu.RUnlock()
		return all, nil
	}
	s.mu.RUnlock()
	lists, err := jsio.WatchValues(ctx, s.kv, ">", func(data []byte) ([]policy.Grant, error) {
		var grants []policy.Grant
		return grants, json.Unmarshal(data, &grants)
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(lists...), nil
}

func (s *GrantStore) read(ctx context.Context, key string) ([]policy.Grant, error) {
	kve, err := jsio.Get(ctx, s.kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return grantsIn(kve)
}

// grantsIn is the grants kve holds; none (nil) holds none.
func grantsIn(kve jetstream.KeyValueEntry) ([]policy.Grant, error) {
	if kve == nil {
		return nil, nil
	}
	var grants []policy.Grant
	if err := json.Unmarshal(kve.Value(), &grants); err != nil {
		return nil, fmt.Errorf("grants under %s (revision %d): %w", kve.Key(), kve.Revision(), err)
	}
	return grants, nil
}

// Match implements policy.Grants: a grant in force at now, of c's
// conversation or an "always" one, that covers c. It reads from memory
// while the store follows the bucket, else from the bucket.
func (s *GrantStore) Match(ctx context.Context, c machine.Call, now time.Time) (policy.Grant, bool, error) {
	var candidates []policy.Grant
	for _, key := range []string{grantKey(c.ConversationID), alwaysKey} {
		grants, ok := s.cached(key)
		if !ok {
			var err error
			if grants, err = s.read(ctx, key); err != nil {
				return policy.Grant{}, false, err
			}
		}
		candidates = append(candidates, grants...)
	}
	for _, g := range candidates {
		if !g.Live(now) || !g.Allows(c) {
			continue
		}
		if !g.SingleUse {
			return g, true, nil
		}
		// Consumed by compare-and-set: of calls racing for it, the one
		// whose removal lands gets it; the others find it gone.
		switch _, err := s.Revoke(ctx, g.ID); {
		case err == nil:
			return g, true, nil
		case !errors.Is(err, machine.ErrNotFound):
			return policy.Grant{}, false, err
		}
	}
	return policy.Grant{}, false, nil
}

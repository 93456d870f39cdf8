package stores

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
)

// DecisionToken is what a one-time decision token stands for: one
// decision on one call, made as one approver, until a deadline.
type DecisionToken struct {
	PendingID string `json:"pendingId"`
	Approve   bool   `json:"approve"`
	// Scope of an approval (once when empty).
	Scope machine.Scope `json:"scope,omitempty"`
	// Approver is the identity the decision is made as.
	Approver  string `json:"approver"`
	IssuedAt  int64  `json:"issuedAt"`  // Unix ms
	ExpiresAt int64  `json:"expiresAt"` // Unix ms
	// UsedAt is when it was redeemed (0: not yet), and UseID the random id
	// of that redemption's write, so that a write whose answer was lost
	// is known as its writer's.
	UsedAt int64  `json:"usedAt,omitempty"`
	UseID  string `json:"useId,omitempty"`
}

// DecisionTokenStore keeps decision tokens in their bucket under the hex
// SHA-256 of the token, never the token: whoever reads the bucket cannot
// decide with what it holds.
//
// Its reads and writes are a request's, in attempts (see jsio.Write): one
// whose answer was lost is asked again, and a redemption stored by an
// attempt whose answer was lost is its own, not another's.
type DecisionTokenStore struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// NewDecisionTokenStore returns the store over the decision tokens'
// bucket, kv, a bucket of js.
func NewDecisionTokenStore(js jetstream.JetStream, kv jetstream.KeyValue) *DecisionTokenStore {
	return &DecisionTokenStore{js: js, kv: kv}
}

// tokenBytes is the randomness of a token: 256 bits, base64url without
// padding (43 characters).
const tokenBytes = 32

// tokenKey is the key a token is stored under.
func tokenKey(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// ValidTokenShape reports whether s could be a token this store issued,
// so that anything else is refused before a read.
func ValidTokenShape(s string) bool {
	if len(s) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil
}

// Issue stores t under a new random token and returns the token.
func (s *DecisionTokenStore) Issue(ctx context.Context, t DecisionToken) (string, error) {
	raw := make([]byte, tokenBytes)
	_, _ = rand.Read(raw)
	token := base64.RawURLEncoding.EncodeToString(raw)
	data, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	if _, err := jsio.Write(ctx, s.js, s.kv, tokenKey(token), data, 0); err != nil {
		return "", fmt.Errorf("store decision token: %w", err)
	}
	return token, nil
}

// Get returns what token stands for and the revision it was read at;
// machine.ErrNotFound for a token never issued (or forgotten).
func (s *DecisionTokenStore) Get(ctx context.Context, token string) (DecisionToken, uint64, error) {
	if !ValidTokenShape(token) {
		return DecisionToken{}, 0, machine.ErrNotFound
	}
	kve, err := jsio.Get(ctx, s.kv, tokenKey(token))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DecisionToken{}, 0, machine.ErrNotFound
	}
	if err != nil {
		return DecisionToken{}, 0, err
	}
	var t DecisionToken
	if err := json.Unmarshal(kve.Value(), &t); err != nil {
		return DecisionToken{}, 0, fmt.Errorf("decision token: unreadable value: %w", err)
	}
	return t, kve.Revision(), nil
}

// ErrTokenUsed is a token redeemed already.
var ErrTokenUsed = fmt.Errorf("%w: decision token already used", machine.ErrConflict)

// Use marks the token read at revision as redeemed at now, by
// compare-and-set: of two redemptions racing, one is told ErrTokenUsed.
func (s *DecisionTokenStore) Use(ctx context.Context, token string, t DecisionToken, revision uint64, now time.Time) (DecisionToken, error) {
	if t.UsedAt != 0 {
		return t, ErrTokenUsed
	}
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	t.UsedAt, t.UseID = now.UnixMilli(), hex.EncodeToString(id)
	data, err := json.Marshal(t)
	if err != nil {
		return t, err
	}
	// The random UseID makes this redemption's bytes its own: write tells
	// it from another's when its answer was lost.
	_, err = jsio.Write(ctx, s.js, s.kv, tokenKey(token), data, revision)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		cur, _, gerr := s.Get(ctx, token)
		if gerr != nil {
			return t, fmt.Errorf("use decision token: %w", gerr)
		}
		return cur, ErrTokenUsed // another redemption won
	}
	if err != nil {
		return t, fmt.Errorf("use decision token: %w", err)
	}
	return t, nil
}

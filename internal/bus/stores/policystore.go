package stores

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/policy"
)

const (
	policyKey       = "document"
	policySourceKey = "source" // sha256 of the file the document was last loaded from
)

// PolicyStore keeps the policy document in KV, so every replica evaluates
// against the same one and sees a change as soon as it is made.
type PolicyStore struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// NewPolicyStore returns the store over the policies bucket, kv of js.
func NewPolicyStore(js jetstream.JetStream, kv jetstream.KeyValue) *PolicyStore {
	return &PolicyStore{js: js, kv: kv}
}

// Get returns the document in force and its revision; with none stored, an
// empty document (built-in defaults: ask about every call) at revision 0.
func (s *PolicyStore) Get(ctx context.Context) (*policy.Document, uint64, error) {
	kve, err := s.kv.Get(ctx, policyKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &policy.Document{}, 0, nil
	} else if err != nil {
		return nil, 0, err
	}
	doc, err := policyIn(kve)
	if err != nil {
		return nil, 0, err
	}
	return doc, kve.Revision(), nil
}

// policyIn is the document kve holds; none (nil) is the empty document.
func policyIn(kve jetstream.KeyValueEntry) (*policy.Document, error) {
	if kve == nil {
		return &policy.Document{}, nil
	}
	doc, err := policy.ParseStored(kve.Value())
	if err != nil {
		return nil, fmt.Errorf("stored policy (revision %d): %w", kve.Revision(), err)
	}
	return doc, nil
}

// Set validates doc and stores it. An invalid document is refused and the
// stored one is left as it was.
func (s *PolicyStore) Set(ctx context.Context, doc *policy.Document) error {
	data, err := marshalValid(doc)
	if err != nil {
		return err
	}
	_, err = s.kv.Put(ctx, policyKey, data)
	return err
}

// Update changes the stored document by compare-and-set (see jsio.Update),
// retrying when someone else changed it in between. A document that
// change leaves invalid is refused and the stored one is left as it was.
func (s *PolicyStore) Update(ctx context.Context, change func(*policy.Document) error) error {
	_, err := jsio.Update(ctx, s.js, s.kv, policyKey, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		doc, err := policyIn(cur)
		if err != nil {
			return nil, err
		}
		if err := change(doc); err != nil {
			return nil, err
		}
		return marshalValid(doc)
	})
	return err
}

func marshalValid(doc *policy.Document) ([]byte, error) {
	if err := doc.Validate(); err != nil {
		return nil, err
	}
	return policy.Marshal(doc)
}

// LoadFile puts the document read from a file in force, unless that same
// file was already loaded: then the stored document, which may have grown
// since (an "always allow" adds a rule to it), is kept. It reports whether
// it stored the file's document.
func (s *PolicyStore) LoadFile(ctx context.Context, data []byte) (bool, error) {
	doc, err := policy.Parse(data)
	if err != nil {
		return false, err
	}
	if err := doc.Validate(); err != nil {
		return false, err
	}
	sum := sha256.Sum256(data)
	if kve, err := s.kv.Get(ctx, policySourceKey); err == nil && bytes.Equal(kve.Value(), []byte(hex.EncodeToString(sum[:]))) {
		if _, rev, err := s.Get(ctx); err == nil && rev > 0 {
			return false, nil
		}
	}
	if err := s.Set(ctx, doc); err != nil {
		return false, err
	}
	_, err = s.kv.Put(ctx, policySourceKey, []byte(hex.EncodeToString(sum[:])))
	return true, err
}

// Follow keeps engine's document the stored one until ctx ends: a KV watch,
// so a change reaches every replica at once. A stored document that fails
// to load (it could only get there past Set, by hand) is logged and the
// engine keeps the last good one.
func (s *PolicyStore) Follow(ctx context.Context, engine *policy.Engine, log *slog.Logger) error {
	return s.follow(ctx, policyKey, "policy", log, func(doc *policy.Document, revision uint64) {
		if doc == nil {
			doc = &policy.Document{} // deleted: the built-in defaults
		}
		if err := engine.SetStored(doc, revision); err != nil {
			log.Error("stored policy is invalid; keeping the previous one", "revision", revision, "err", err)
			return
		}
		log.Info("policy in force", "revision", revision)
	})
}

// follow watches key until ctx ends, calling set with the document stored
// under it when the watch starts and each time it changes (nil: none
// stored). A document that does not load, what (policy, shadow policy)
// names in the log, and set is not called.
func (s *PolicyStore) follow(ctx context.Context, key, what string, log *slog.Logger, set func(doc *policy.Document, revision uint64)) error {
	w, err := s.kv.Watch(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it began
		}
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case kve := <-w.Updates():
			if kve == nil {
				continue // the initial value is in
			}
			if kve.Operation() != jetstream.KeyValuePut {
				set(nil, kve.Revision())
				continue
			}
			doc, err := policy.ParseStored(kve.Value())
			if err != nil {
				log.Error("stored "+what+" does not load; keeping the previous one", "revision", kve.Revision(), "err", err)
				continue
			}
			set(doc, kve.Revision())
		}
	}
}

// AddAllowRule adds an allow rule for pattern to a team's policy (the
// default scope's, for calls with no team), unless it is already there.
func (s *PolicyStore) AddAllowRule(ctx context.Context, team, pattern string) error {
	return s.Update(ctx, func(doc *policy.Document) error {
		var p *policy.Policy
		if team == "" {
			if doc.Default == nil {
				doc.Default = &policy.Policy{}
			}
			p = doc.Default
		} else {
			if doc.Teams == nil {
				doc.Teams = map[string]*policy.Policy{}
			}
			if doc.Teams[team] == nil {
				doc.Teams[team] = &policy.Policy{}
			}
			p = doc.Teams[team]
		}
		if !slices.Contains(p.Rules.Allow, pattern) {
			p.Rules.Allow = append(p.Rules.Allow, pattern)
		}
		return nil
	})
}

package bus

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

const (
	policyKey       = "document"
	policySourceKey = "source" // sha256 of the file the document was last loaded from
)

// PolicyStore keeps the policy document in KV, so every replica evaluates
// against the same one and sees a change as soon as it is made.
type PolicyStore struct {
	kv jetstream.KeyValue
}

// NewPolicyStore returns the store over the policies bucket.
func NewPolicyStore(kv jetstream.KeyValue) *PolicyStore { return &PolicyStore{kv: kv} }

// Get returns the document in force and its revision; with none stored, an
// empty document (built-in defaults: ask about every call) at revision 0.
func (s *PolicyStore) Get(ctx context.Context) (*policy.Document, uint64, error) {
	kve, err := s.kv.Get(ctx, policyKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &policy.Document{}, 0, nil
	} else if err != nil {
		return nil, 0, err
	}
	doc, err := policy.Parse(kve.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("stored policy (revision %d): %w", kve.Revision(), err)
	}
	return doc, kve.Revision(), nil
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

// Update changes the stored document by compare-and-set, retrying when
// someone else changed it in between.
func (s *PolicyStore) Update(ctx context.Context, change func(*policy.Document) error) error {
	for {
		doc, rev, err := s.Get(ctx)
		if err != nil {
			return err
		}
		if err := change(doc); err != nil {
			return err
		}
		data, err := marshalValid(doc)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, policyKey, data)
		} else {
			_, err = s.kv.Update(ctx, policyKey, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return err
	}
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
	w, err := s.kv.Watch(ctx, policyKey)
	if err != nil {
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
			doc := &policy.Document{}
			if kve.Operation() == jetstream.KeyValuePut {
				if doc, err = policy.Parse(kve.Value()); err != nil {
					log.Error("stored policy does not load; keeping the previous one", "revision", kve.Revision(), "err", err)
					continue
				}
			}
			if err := engine.SetDocument(doc); err != nil {
				log.Error("stored policy is invalid; keeping the previous one", "revision", kve.Revision(), "err", err)
				continue
			}
			log.Info("policy in force", "revision", kve.Revision())
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

// Spending is one team's ledger for one day.
type Spending struct {
	Reserved float64 `json:"reserved"` // estimated cost of calls allowed and not yet finished
	Spent    float64 `json:"spent"`    // actual cost of calls finished
}

// BudgetLedger counts each team's spending per day in KV, changed only by
// compare-and-set: two calls racing for the last of a budget cannot both
// reserve it.
type BudgetLedger struct {
	kv jetstream.KeyValue
}

var _ policy.Budget = (*BudgetLedger)(nil)

// NewBudgetLedger returns the ledger over the budgets bucket.
func NewBudgetLedger(kv jetstream.KeyValue) *BudgetLedger { return &BudgetLedger{kv: kv} }

func budgetKey(team, day string) string { return machine.KeyToken("team:"+team) + "." + day }

// Get returns a team's spending on a day.
func (l *BudgetLedger) Get(ctx context.Context, team, day string) (Spending, error) {
	s, _, err := l.get(ctx, team, day)
	return s, err
}

func (l *BudgetLedger) get(ctx context.Context, team, day string) (Spending, uint64, error) {
	kve, err := l.kv.Get(ctx, budgetKey(team, day))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Spending{}, 0, nil
	} else if err != nil {
		return Spending{}, 0, err
	}
	var s Spending
	err = json.Unmarshal(kve.Value(), &s)
	return s, kve.Revision(), err
}

// change applies f to a team's spending on a day by compare-and-set.
func (l *BudgetLedger) change(ctx context.Context, team, day string, f func(*Spending) bool) (bool, error) {
	for {
		s, rev, err := l.get(ctx, team, day)
		if err != nil {
			return false, err
		}
		if !f(&s) {
			return false, nil
		}
		data, _ := json.Marshal(s)
		if rev == 0 {
			_, err = l.kv.Create(ctx, budgetKey(team, day), data)
		} else {
			_, err = l.kv.Update(ctx, budgetKey(team, day), data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return err == nil, err
	}
}

// Reserve implements policy.Budget.
func (l *BudgetLedger) Reserve(ctx context.Context, team, day string, amount, limit float64) (bool, error) {
	return l.change(ctx, team, day, func(s *Spending) bool {
		if s.Reserved+s.Spent+amount > limit {
			return false
		}
		s.Reserved += amount
		return true
	})
}

// Settle turns a finished call's reservation into what it actually cost
// (0 for a call that never ran).
func (l *BudgetLedger) Settle(ctx context.Context, team, day string, reserved, actual float64) error {
	_, err := l.change(ctx, team, day, func(s *Spending) bool {
		s.Reserved = max(s.Reserved-reserved, 0)
		s.Spent += actual
		return true
	})
	return err
}

// SettleObserver returns a machine observer that settles the budget of
// every call that ends: what it reserved is released, and what it cost is
// spent (on the day it reserved, or the day it ended).
func (l *BudgetLedger) SettleObserver(log *slog.Logger) func(context.Context, *machine.Entry) {
	return func(ctx context.Context, e *machine.Entry) {
		if !e.Status.Terminal() || (e.CostReserved == 0 && e.Cost == 0) {
			return
		}
		day := e.CostDay
		if day == "" {
			day = time.Now().UTC().Format("2006-01-02")
		}
		if err := l.Settle(ctx, e.Team, day, e.CostReserved, e.Cost); err != nil {
			// Left reserved, the estimate keeps counting: the budget errs
			// toward asking, never toward overspending.
			log.Error("settling budget failed", "pendingId", e.PendingID, "team", e.Team, "err", err)
		}
	}
}

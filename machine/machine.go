package machine

import (
	"context"
	"fmt"
	"time"
)

// Machine runs the commands that move entries, each through transition.
// It holds no entry state of its own, so any number of Machines in any
// number of processes can share one Store.
type Machine struct {
	store    Store
	eval     Evaluator
	now      func() time.Time
	observer func(ctx context.Context, e *Entry)
	signer   Signer // receipts (receipt.go); nil: none
}

// Option configures a Machine.
type Option func(*Machine)

// WithEvaluator sets the policy that Submit consults (default AskEverything).
func WithEvaluator(e Evaluator) Option { return func(m *Machine) { m.eval = e } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(m *Machine) { m.now = now } }

// WithObserver has f called with every entry this Machine writes, after the
// write won. Only the winner of a race sees its transition, so f runs once
// per transition across all Machines; but it does not run at all if the
// process dies right after the write, so nothing that must happen may hang
// on it (toolgate reacts to transitions through the relay's events; tests
// and benchmarks count with an observer).
func WithObserver(f func(ctx context.Context, e *Entry)) Option {
	return func(m *Machine) { m.observer = f }
}

// New returns a Machine over store.
func New(store Store, opts ...Option) *Machine {
	m := &Machine{store: store, eval: AskEverything, now: time.Now}
	for _, o := range opts {
		o(m)
	}
	return m
}

func (m *Machine) observe(ctx context.Context, e *Entry) {
	if m.observer != nil {
		m.observer(ctx, e)
	}
}

// Get returns one entry.
func (m *Machine) Get(ctx context.Context, pendingID string) (*Entry, error) {
	e, _, err := m.store.Get(ctx, pendingID)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", pendingID, err)
	}
	return e, nil
}

// ListConversation returns every entry of one conversation.
func (m *Machine) ListConversation(ctx context.Context, conversationID string) ([]*Entry, error) {
	return m.store.ListConversation(ctx, conversationID)
}

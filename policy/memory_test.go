package policy

import (
	"context"
	"sync"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// memGrants is an in-memory Grants: the first grant that allows the call.
type memGrants struct {
	grants []Grant
	err    error
}

func (m *memGrants) Match(_ context.Context, c machine.Call, now time.Time) (Grant, bool, error) {
	if m.err != nil {
		return Grant{}, false, m.err
	}
	for _, g := range m.grants {
		if g.Live(now) && g.Allows(c) {
			return g, true, nil
		}
	}
	return Grant{}, false, nil
}

// memBudget is an in-memory Budget whose Reserve is atomic under a mutex,
// as the KV one is under compare-and-set.
type memBudget struct {
	mu    sync.Mutex
	spent map[string]Micros // team + "/" + day
	err   error
	calls int
}

func newMemBudget() *memBudget { return &memBudget{spent: map[string]Micros{}} }

func (b *memBudget) Reserve(_ context.Context, team, day string, amount, limit Micros) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.err != nil {
		return false, b.err
	}
	key := team + "/" + day
	if b.spent[key]+amount > limit {
		return false, nil
	}
	b.spent[key] += amount
	return true, nil
}

func (b *memBudget) Spent(team, day string) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spent[team+"/"+day].Float64()
}

func (b *memBudget) reset(spent map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spent = map[string]Micros{}
	for k, v := range spent {
		b.spent[k] = MicrosOf(v)
	}
}

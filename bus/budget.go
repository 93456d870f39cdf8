package bus

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// Spending is one team's ledger for one day.
type Spending struct {
	Reserved float64 `json:"reserved"` // estimated cost of calls allowed and not yet finished
	Spent    float64 `json:"spent"`    // actual cost of calls finished
}

// DayBudget is one team's spending on one day, as listed.
type DayBudget struct {
	Team     string  `json:"team"`
	Day      string  `json:"day"` // YYYY-MM-DD, UTC
	Reserved float64 `json:"reserved"`
	Spent    float64 `json:"spent"`
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

// teamKeyPrefix is the "team:" a team's name is prefixed with before it
// becomes a key token: it always makes the token base64, so even the team
// with no name ("") has one, and the team is read back from the key.
const teamKeyPrefix = "team:"

func teamToken(team string) string { return machine.KeyToken(teamKeyPrefix + team) }

func budgetKey(team, day string) string { return teamToken(team) + "." + day }

// parseBudgetKey is budgetKey's inverse.
func parseBudgetKey(key string) (team, day string, ok bool) {
	tok, day, ok := strings.Cut(key, ".")
	enc, isB64 := strings.CutPrefix(tok, "=")
	if !ok || !isB64 {
		return "", "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", "", false
	}
	team, ok = strings.CutPrefix(string(raw), teamKeyPrefix)
	return team, day, ok
}

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

// List returns every team's spending, day by day, sorted by team and day.
func (l *BudgetLedger) List(ctx context.Context) ([]DayBudget, error) {
	return l.list(ctx, ">")
}

// ListTeam returns one team's spending, day by day. It reads only that
// team's keys. The team with no name ("") is a team like any other.
func (l *BudgetLedger) ListTeam(ctx context.Context, team string) ([]DayBudget, error) {
	return l.list(ctx, teamToken(team)+".*")
}

func (l *BudgetLedger) list(ctx context.Context, filter string) ([]DayBudget, error) {
	w, err := l.kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	days := []DayBudget{}
	for {
		var kve jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case kve = <-w.Updates():
		}
		if kve == nil { // the initial values are all in
			break
		}
		team, day, ok := parseBudgetKey(kve.Key())
		if !ok {
			return nil, fmt.Errorf("budgets: key %q is not a team's day", kve.Key())
		}
		var s Spending
		if err := json.Unmarshal(kve.Value(), &s); err != nil {
			return nil, fmt.Errorf("budgets: key %s: %w", kve.Key(), err)
		}
		days = append(days, DayBudget{Team: team, Day: day, Reserved: s.Reserved, Spent: s.Spent})
	}
	slices.SortFunc(days, func(a, b DayBudget) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Day, b.Day))
	})
	return days, nil
}

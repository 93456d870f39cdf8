package stores

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// Spending is one team's ledger for one day. Its amounts are micro-units
// of the currency (policy.Micros), so that sums are exact.
type Spending struct {
	Reserved policy.Micros // estimated cost of calls allowed and not yet finished
	Spent    policy.Micros // actual cost of calls finished
	// Applied holds the TOOL_EVENTS sequences already settled into the
	// amounts. It is written in the same compare-and-set as they are, so a
	// settlement delivered twice, or to two processes at once, counts once.
	Applied consumer.Applied
}

// storedSpending is Spending as kept in KV, with a random nonce of the write that
// stored it: two changes that lead to the same amounts are still told
// apart (see jsio.Write), so one whose answer was lost is never taken for
// another's.
//
// The amounts are kept as integers of micro-units, reservedMicros and
// spentMicros. An older version kept float64 sums under reserved and
// spent, and those are still written, from the micro-units, so that a
// process of that version still reads the day as it stands while an
// upgrade rolls out. A value with no micro-units is one such a process
// wrote (or wrote back, keeping only the keys it knows): its float sums
// are read, rounded to the millionth, and nothing it holds is lost.
type storedSpending struct {
	ReservedMicros *policy.Micros   `json:"reservedMicros,omitempty"`
	SpentMicros    *policy.Micros   `json:"spentMicros,omitempty"`
	Reserved       float64          `json:"reserved"`
	Spent          float64          `json:"spent"`
	Applied        consumer.Applied `json:"applied,omitzero"`
	Write          string           `json:"write,omitempty"`
}

// encodeSpending is s as stored, with a new write nonce.
func encodeSpending(s Spending) []byte {
	data, _ := json.Marshal(storedSpending{
		ReservedMicros: &s.Reserved, SpentMicros: &s.Spent,
		Reserved: s.Reserved.Float64(), Spent: s.Spent.Float64(),
		Applied: s.Applied, Write: rand.Text(),
	})
	return data
}

// decodeSpending reads a stored value of either version.
func decodeSpending(data []byte) (Spending, error) {
	var v storedSpending
	if err := json.Unmarshal(data, &v); err != nil {
		return Spending{}, err
	}
	s := Spending{Reserved: policy.MicrosOf(v.Reserved), Spent: policy.MicrosOf(v.Spent), Applied: v.Applied}
	if v.ReservedMicros != nil {
		s.Reserved = *v.ReservedMicros
	}
	if v.SpentMicros != nil {
		s.Spent = *v.SpentMicros
	}
	return s, nil
}

// DayBudget is one team's spending on one day, as listed.
type DayBudget struct {
	Team     string
	Day      string // YYYY-MM-DD, UTC
	Reserved policy.Micros
	Spent    policy.Micros
}

// BudgetLedger counts each team's spending per day in KV, changed only by
// compare-and-set: two calls racing for the last of a budget cannot both
// reserve it.
type BudgetLedger struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

var _ policy.Budget = (*BudgetLedger)(nil)

// NewBudgetLedger returns the ledger over the budgets bucket, kv of js.
func NewBudgetLedger(js jetstream.JetStream, kv jetstream.KeyValue) *BudgetLedger {
	return &BudgetLedger{js: js, kv: kv}
}

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
	kve, err := jsio.Get(ctx, l.kv, budgetKey(team, day))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Spending{}, nil
	} else if err != nil {
		return Spending{}, err
	}
	return spendingIn(kve)
}

// spendingIn is the spending kve holds; none (nil) is nothing spent.
func spendingIn(kve jetstream.KeyValueEntry) (Spending, error) {
	if kve == nil {
		return Spending{}, nil
	}
	sp, err := decodeSpending(kve.Value())
	if err != nil {
		return Spending{}, fmt.Errorf("budgets: key %s: %w", kve.Key(), err)
	}
	return sp, nil
}

// change applies f to a team's spending on a day by compare-and-set
// (see jsio.Update), and reports whether f changed it.
func (l *BudgetLedger) change(ctx context.Context, team, day string, f func(*Spending) bool) (bool, error) {
	rev, err := jsio.Update(ctx, l.js, l.kv, budgetKey(team, day), func(cur jetstream.KeyValueEntry) ([]byte, error) {
		s, err := spendingIn(cur)
		if err != nil || !f(&s) {
			return nil, err
		}
		return encodeSpending(s), nil
	})
	return rev != 0, err
}

// Reserve implements policy.Budget.
func (l *BudgetLedger) Reserve(ctx context.Context, team, day string, amount, limit policy.Micros) (bool, error) {
	return l.change(ctx, team, day, func(s *Spending) bool {
		if s.Reserved.Plus(s.Spent).Plus(amount) > limit {
			return false
		}
		s.Reserved = s.Reserved.Plus(amount)
		return true
	})
}

// Settle turns a finished call's reservation into what it actually cost
// (0 for a call that never ran): reserved is released and actual spent.
//
// seq is the TOOL_EVENTS sequence of the event that ended the call, and
// makes Settle idempotent: a seq the day's value has already taken in
// changes nothing, and Settle reports false. settledUpTo is a sequence up
// to which every event has been settled wherever it belongs (the settling
// consumer's ack floor, or anything older); the value's record of applied
// sequences folds into it, so it stays a handful of numbers.
func (l *BudgetLedger) Settle(ctx context.Context, team, day string, reserved, actual policy.Micros, seq, settledUpTo uint64) (bool, error) {
	return l.change(ctx, team, day, func(s *Spending) bool {
		s.Applied.Raise(settledUpTo)
		if s.Applied.Has(seq) {
			return false
		}
		s.Applied.Add([][2]uint64{{seq, seq}})
		// An observer of an older version may have released this
		// reservation already: never hold a negative one.
		s.Reserved = max(s.Reserved.Plus(-reserved), 0)
		s.Spent = s.Spent.Plus(actual)
		return true
	})
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
		s, err := decodeSpending(kve.Value())
		if err != nil {
			return nil, fmt.Errorf("budgets: key %s: %w", kve.Key(), err)
		}
		days = append(days, DayBudget{Team: team, Day: day, Reserved: s.Reserved, Spent: s.Spent})
	}
	slices.SortFunc(days, func(a, b DayBudget) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Day, b.Day))
	})
	return days, nil
}

package stores

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// RateWindow is one rate rule's counter for one team, conversation or
// caller (or for all its calls): the time of each slot taken in the
// rule's window, as of its last change.
type RateWindow struct {
	Rule  string           `json:"rule"` // policy.RateRule.ID
	Scope policy.RateScope `json:"scope"`
	Value string           `json:"value,omitempty"` // the team, conversation or caller; "" for all
	// Slots are the epoch milliseconds of the slots taken, oldest first;
	// each is held for the rule's per. Those older than that are dropped
	// at the next slot taken.
	Slots []int64 `json:"slots"`
}

// Live returns the slots still held at now in a window of per, and when
// the oldest of them is freed (the zero time when none is held).
func (w RateWindow) Live(now time.Time, per time.Duration) (n int, freed time.Time) {
	from := now.Add(-per).UnixMilli()
	for _, s := range w.Slots {
		if s <= from {
			continue
		}
		n++
		if f := time.UnixMilli(s).UTC().Add(per); freed.IsZero() || f.Before(freed) {
			freed = f
		}
	}
	return n, freed
}

// storedWindow is RateWindow as kept in KV, with a random nonce of the
// write that stored it (see jsio.Write): two takes at the same millisecond
// store different bytes.
type storedWindow struct {
	RateWindow
	Write string `json:"write,omitempty"`
}

// RateCounters keeps the rate rules' counters in KV, a sliding window
// per key, changed only by compare-and-set: of calls racing for the last
// slot of a window, one gets it, on whichever process evaluates them.
type RateCounters struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

var _ policy.RateCounter = (*RateCounters)(nil)

// NewRateCounters returns the counters over the rate limits bucket, kv
// of js.
func NewRateCounters(js jetstream.JetStream, kv jetstream.KeyValue) *RateCounters {
	return &RateCounters{js: js, kv: kv}
}

// rateKey is <rule>.<token of scope:value>: the token is always base64
// (the colon is not plain), so even the team with no name has one.
func rateKey(k policy.RateKey) string {
	return k.Rule + "." + machine.KeyToken(string(k.Scope)+":"+k.Value)
}

// Take implements policy.RateCounter: a sliding window of per before
// now, exact to the millisecond (and to the clocks of the processes
// that take slots).
func (c *RateCounters) Take(ctx context.Context, key policy.RateKey, max int, per time.Duration, now time.Time) (bool, int, error) {
	var n int // the slots held, with this one if it is taken
	rev, err := jsio.Update(ctx, c.js, c.kv, rateKey(key), func(cur jetstream.KeyValueEntry) ([]byte, error) {
		w, err := windowIn(cur)
		if err != nil {
			return nil, err
		}
		from := now.Add(-per).UnixMilli()
		live := slices.DeleteFunc(w.Slots, func(s int64) bool { return s <= from })
		if n = len(live); n >= max {
			return nil, nil
		}
		w = RateWindow{Rule: key.Rule, Scope: key.Scope, Value: key.Value, Slots: append(live, now.UnixMilli())}
		n = len(w.Slots)
		return json.Marshal(storedWindow{w, rand.Text()})
	})
	if err != nil {
		return false, 0, err
	}
	return rev != 0, n, nil
}

// windowIn is the window kve holds; none (nil) holds no slot.
func windowIn(kve jetstream.KeyValueEntry) (RateWindow, error) {
	if kve == nil {
		return RateWindow{}, nil
	}
	var w storedWindow
	if err := json.Unmarshal(kve.Value(), &w); err != nil {
		return RateWindow{}, fmt.Errorf("rate limits: key %s: %w", kve.Key(), err)
	}
	return w.RateWindow, nil
}

// Windows returns the counters of a rate rule (its policy.RateRule.ID),
// sorted by scope value. A window may hold slots no longer live: see
// RateWindow.Live.
func (c *RateCounters) Windows(ctx context.Context, rule string) ([]RateWindow, error) {
	out, err := jsio.WatchValues(ctx, c.kv, rule+".*", func(data []byte) (RateWindow, error) {
		var sw storedWindow
		err := json.Unmarshal(data, &sw)
		return sw.RateWindow, err
	})
	if err != nil {
		return nil, fmt.Errorf("rate limits: %w", err)
	}
	if out == nil {
		out = []RateWindow{}
	}
	slices.SortFunc(out, func(a, b RateWindow) int {
		return cmp.Or(strings.Compare(string(a.Scope), string(b.Scope)), strings.Compare(a.Value, b.Value))
	})
	return out, nil
}

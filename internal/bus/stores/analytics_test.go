package stores_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
)

// asked is one call of an AnalyticsStore.Update's f: what it was given.
type asked struct {
	value    string
	revision uint64
}

// update is store.Update of key, recording what f is given; f appends
// suffix to the value it is given, or, given none (a held value, or the
// key absent), stores start.
func update(ctx context.Context, store *stores.AnalyticsStore, key string, held *uint64, start, suffix string) (uint64, []asked, error) {
	var calls []asked
	rev, err := store.Update(ctx, key, held, func(value []byte, revision uint64) ([]byte, error) {
		calls = append(calls, asked{string(value), revision})
		if value == nil {
			return []byte(start), nil
		}
		return append(value, suffix...), nil
	})
	return rev, calls, err
}

// TestAnalyticsStore_UpdateStartsFromWhatTheWriterHolds: a writer that
// holds a key's value at its revision writes over it with no read; one
// whose revision another write has passed is refused, reads, and changes
// what it read. A key that is not there is machine.ErrNotFound.
func TestAnalyticsStore_UpdateStartsFromWhatTheWriterHolds(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	kv, err := bus.ProvisionAnalytics(ctx, env.JS, 1)
	require.NoError(t, err)
	a, b := stores.NewAnalyticsStore(env.JS, kv), stores.NewAnalyticsStore(env.JS, kv)

	_, _, err = a.Get(ctx, "k")
	require.ErrorIs(t, err, machine.ErrNotFound)

	var none uint64 // held absent: created with no read
	rev1, calls, err := update(ctx, a, "k", &none, "a", "")
	require.NoError(t, err)
	assert.Equal(t, []asked{{"", 0}}, calls)

	rev2, calls, err := update(ctx, b, "k", &rev1, "b", "")
	require.NoError(t, err)
	assert.Equal(t, []asked{{"", rev1}}, calls, "held at the key's revision: written with no read")

	rev3, calls, err := update(ctx, a, "k", &rev1, "lost", "+a")
	require.NoError(t, err)
	assert.Equal(t, []asked{{"", rev1}, {"b", rev2}}, calls, "held at a revision passed: refused, then what was read is changed")
	value, rev, err := a.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "b+a", string(value))
	assert.Equal(t, rev3, rev)

	_, calls, err = update(ctx, b, "k", nil, "", "+b")
	require.NoError(t, err)
	assert.Equal(t, []asked{{"b+a", rev3}}, calls, "none held: read first")
}

// TestAnalyticsStore_AnUpdateWhoseAnswerWasLostIsNoConflictWithItself:
// an aggregate's write whose answer does not come is sent again, and one
// stored after all is the writer's, not another's: it is written once,
// and f is not asked again.
func TestAnalyticsStore_AnUpdateWhoseAnswerWasLostIsNoConflictWithItself(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	kv, err := bus.ProvisionAnalytics(ctx, env.JS, 1)
	require.NoError(t, err)
	store := stores.NewAnalyticsStore(env.JS, kv)
	rev1, _, err := update(ctx, store, "k", nil, "0", "")
	require.NoError(t, err)

	lossy := stores.NewAnalyticsStore(env.JS, &bustest.LostReplies{KeyValue: kv, Stored: true, Lost: 1})
	rev, calls, err := update(ctx, lossy, "k", nil, "", "+1")
	require.NoError(t, err, "its own write is no conflict")
	assert.Len(t, calls, 1, "asked once: %v", calls)
	value, stored, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "0+1", string(value), "written once")
	assert.Equal(t, stored, rev)
	assert.Greater(t, rev, rev1)
}

package bus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// A bucket whose stream is at its maximum bytes refuses a write within
// seconds with an error that matches wire.ErrStorageFull (storage_full on
// the wire) and says how to make room, and stores nothing of it.
// (cmd/toolgate's TestResource_FullDisk fills a server's whole store.)
func TestKVStore_AStreamAtItsLimitRefusesWithStorageFull(t *testing.T) {
	t.Parallel()
	_, js := bustest.Connect(t, bustest.Server(t).ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "small", MaxBytes: 8 << 10})
	require.NoError(t, err)
	store := bus.NewKVStore(js, kv)

	var took time.Duration
	var id string
	for i := 0; err == nil && i < 100; i++ {
		id = fmt.Sprintf("full.c%d", i)
		from := time.Now()
		_, err = store.Create(ctx, &machine.Entry{PendingID: id, ToolName: strings.Repeat("x", 500)})
		took = time.Since(from)
	}
	require.ErrorIs(t, err, wire.ErrStorageFull)
	assert.Less(t, took, 5*time.Second, "refused late: %v", err)
	assert.Contains(t, err.Error(), "maximum bytes exceeded")
	assert.Contains(t, err.Error(), "make room")
	status, code := wire.ErrorStatus(fmt.Errorf("submit %s: %w", id, err))
	assert.Equal(t, 507, status)
	assert.Equal(t, "storage_full", code)
	_, err = kv.Get(ctx, id)
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the refused write is stored")
}

// The analytics' aggregates change through the same loop as the stores':
// one that a full bucket refuses is refused with wire.ErrStorageFull within
// seconds, not retried until its context ends.
func TestAnalyticsStore_AStreamAtItsLimitRefusesWithStorageFull(t *testing.T) {
	t.Parallel()
	_, js := bustest.Connect(t, bustest.Server(t).ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "small_analytics", MaxBytes: 8 << 10})
	require.NoError(t, err)
	store := stores.NewAnalyticsStore(js, kv)

	var took time.Duration
	for i := 0; err == nil && i < 100; i++ {
		from := time.Now()
		_, err = store.Update(ctx, fmt.Sprintf("g1.tool.t%d", i), nil, func([]byte, uint64) ([]byte, error) {
			return []byte(strings.Repeat("x", 500)), nil
		})
		took = time.Since(from)
	}
	require.ErrorIs(t, err, wire.ErrStorageFull)
	assert.Less(t, took, 5*time.Second, "refused late: %v", err)
}

// On a cluster whose every member's store is full, the stream's leader
// refuses a write for want of storage and steps down, and no member takes
// its place: the writes after it go unanswered. toolgate refuses them as
// storage full within seconds, not as an internal error at the request's
// deadline.
func TestKVStore_EveryMemberFullRefusesWithStorageFull(t *testing.T) {
	t.Parallel()
	servers := bustest.ClusterConfigured(t, 3, func(o *natsserver.Options) error {
		o.JetStreamMaxStore = 2 << 20
		return nil
	})
	_, js := bustest.Connect(t, bustest.ClientURLs(servers))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "full", Replicas: 3})
	require.NoError(t, err)
	store := bus.NewKVStore(js, kv)

	var took time.Duration
	for i := 0; err == nil && i < 1000; i++ {
		from := time.Now()
		_, err = store.Create(ctx, &machine.Entry{PendingID: fmt.Sprintf("full.c%d", i), ToolName: strings.Repeat("x", 8<<10)})
		took = time.Since(from)
	}
	require.ErrorIs(t, err, wire.ErrStorageFull)
	assert.Less(t, took, 15*time.Second, "refused late: %v", err)
	from := time.Now()
	_, err = store.Create(ctx, &machine.Entry{PendingID: "full.again", ToolName: "x"})
	require.ErrorIs(t, err, wire.ErrStorageFull, "the next write, %s later", time.Since(from))
	assert.Less(t, time.Since(from), 15*time.Second, "refused late: %v", err)
	assert.Contains(t, err.Error(), "make room")
	t.Logf("refused %s after: %v", time.Since(from).Round(time.Millisecond), err)
}

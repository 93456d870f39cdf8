package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestKVStore_WritesResumeSoonAfterTheLeaderDies kills the leader of the
// entries' stream on a 3-node cluster while writers create and update
// entries, each write with a request's 30s deadline. Every writer's writes
// resume within 2s of the new leader's election (none waits out its
// deadline on the dead leader), and every write succeeds: none fails, and
// none that went unanswered and was sent again is reported as a conflict
// with itself.
func TestKVStore_WritesResumeSoonAfterTheLeaderDies(t *testing.T) {
	t.Parallel()
	servers := bustest.Cluster(t, 3)
	stream := "KV_" + wire.CallsBucket
	_, js := bustest.Connect(t, bustest.ClientURLs(servers))
	ctx := t.Context()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := bus.Provision(pctx, js, bus.Topology{Replicas: 3})
	require.NoError(t, err)
	leader := -1
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("%s has a leader", stream), func() (bool, any) { leader = bustest.StreamLeader(servers, stream); return leader >= 0, leader })

	// The writers' connection is to a server that lives, so what is
	// measured is the stream's election, not a reconnect.
	_, js = bustest.Connect(t, servers[(leader+1)%3].ClientURL())
	kv, err := js.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	store := bus.NewKVStore(js, kv)

	type write struct {
		start, end time.Time
		err        error
	}
	const writers = 4
	var mu sync.Mutex
	done := make([][]write, writers)
	count := func(after time.Time) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, ws := range done {
			for _, w := range ws {
				if w.start.After(after) {
					n++
				}
			}
		}
		return n
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			timed := func(f func(context.Context) error) bool {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				w := write{start: time.Now()}
				w.err = f(wctx)
				w.end = time.Now()
				mu.Lock()
				done[i] = append(done[i], w)
				mu.Unlock()
				return w.err == nil
			}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				e := entry(fmt.Sprintf("writer-%d", i), fmt.Sprint(n))
				var rev uint64
				if !timed(func(ctx context.Context) (err error) { rev, err = store.Create(ctx, e); return err }) {
					continue
				}
				e.Status = machine.StateApproved
				timed(func(ctx context.Context) error { _, err := store.Update(ctx, e, rev); return err })
			}
		})
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the writers got going: 40 writes", func() (bool, any) { n := count(time.Time{}); return n >= 40, n })

	killed := time.Now()
	servers[leader].Shutdown()
	var elected time.Time
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("%s elected a new leader (not server %d)", stream, leader), func() (bool, any) {
		l := bustest.StreamLeader(servers, stream)
		if l >= 0 && l != leader {
			elected = time.Now()
			return true, l
		}
		return false, l
	})
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "writes resumed since the election", func() (bool, any) {
		n := count(elected)
		return n >= 40, n
	})
	halt()

	t.Logf("election: %v after the kill", elected.Sub(killed).Round(time.Millisecond))
	for i, ws := range done {
		var resumed time.Time
		for _, w := range ws {
			assert.NoError(t, w.err, "writer %d: the write started %v after the kill", i, w.start.Sub(killed).Round(time.Millisecond))
			if w.err == nil && w.end.After(elected) && resumed.IsZero() {
				resumed = w.end
			}
		}
		require.False(t, resumed.IsZero(), "writer %d never wrote after the election", i)
		t.Logf("writer %d: first write done %v after the election", i, resumed.Sub(elected).Round(time.Millisecond))
		assert.LessOrEqual(t, resumed.Sub(elected), 2*time.Second, "writer %d resumed %v after the election", i, resumed.Sub(elected))
	}
}

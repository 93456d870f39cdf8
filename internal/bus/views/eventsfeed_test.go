package views_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// publishEvents publishes n events on TOOL_EVENTS and waits for them to be
// stored.
func publishEvents(t *testing.T, env *bustest.Env, n int) {
	t.Helper()
	for i := range n {
		_, err := env.JS.PublishAsync(wire.SubjectApprovalRequired, fmt.Appendf(nil, `{"n":%d}`, i))
		require.NoError(t, err)
	}
	select {
	case <-env.JS.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatalf("%d events not stored within 30s", env.JS.PublishAsyncPending())
	}
}

// seqs collects the sequences one follower is handed.
type seqs struct {
	mu  sync.Mutex
	got []uint64
}

func (s *seqs) add(seq uint64, _ string, _ []byte) {
	s.mu.Lock()
	s.got = append(s.got, seq)
	s.mu.Unlock()
}

func (s *seqs) copy() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// follow runs f.Follow until the test ends, and returns once it has
// started.
func follow(t *testing.T, f interface {
	Follow(context.Context, uint64, func(), func(uint64, string, []byte)) error
}, from uint64, fn func(uint64, string, []byte)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- f.Follow(ctx, from, func() { close(started) }, fn) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("follow from %d: %v", from, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("follow from %d: not started within 30s", from)
	}
}

// seqRange is from, from+1, ..., to.
func seqRange(from, to uint64) []uint64 {
	var r []uint64
	for s := from; s <= to; s++ {
		r = append(r, s)
	}
	return r
}

func eventsConsumers(t *testing.T, env *bustest.Env) int {
	t.Helper()
	st, err := env.JS.Stream(context.Background(), wire.EventsStream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Consumers
}

// Followers of the feed, from now or from an event it keeps, cost the
// server no consumer; one from further back has one of its own until it
// reaches the events the feed keeps, and then follows the feed. Each is
// handed every event from where it asked, once, in order.
func TestEventsFeed_FollowersShareOneConsumer(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	publishEvents(t, env, 3) // 1-3, before the feed: not in it
	f := bustest.RunEventsFeed(t, env.JS)
	var fromNow, fromKept, fromBefore seqs
	follow(t, f, 0, fromNow.add)
	publishEvents(t, env, 7) // 4-10
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the one following from now handed 7", func() (bool, any) { got := fromNow.copy(); return len(got) == 7, got })
	follow(t, f, 6, fromKept.add)
	follow(t, f, 2, fromBefore.add)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the one following from before it handed 2-10", func() (bool, any) {
		got := fromBefore.copy()
		return len(got) == 9, got
	})
	// Its consumer, remade by nobody now, is deleted on a goroutine.
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the feed's consumer only", func() (bool, any) {
		got := eventsConsumers(t, env)
		return got == 1, got
	})
	publishEvents(t, env, 10) // 11-20

	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "17, 15 and 19 events handed", func() (bool, any) {
		now, kept, before := fromNow.copy(), fromKept.copy(), fromBefore.copy()
		return len(now) == 17 && len(kept) == 15 && len(before) == 19, [][]uint64{now, kept, before}
	})
	require.Equal(t, seqRange(4, 20), fromNow.copy())
	require.Equal(t, seqRange(6, 20), fromKept.copy())
	require.Equal(t, seqRange(2, 20), fromBefore.copy())
}

// A follower too slow for the feed's buffer goes on with a consumer of its
// own from the first event it had not been handed, then the feed again
// once it has caught up: it misses none and is handed none twice.
func TestEventsFeed_SlowFollowerGoesOnAlone(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	f := bustest.RunEventsFeed(t, env.JS)
	var fast, slow seqs
	release := make(chan struct{})
	follow(t, f, 0, fast.add)
	follow(t, f, 0, func(seq uint64, subject string, data []byte) {
		<-release
		slow.add(seq, subject, data)
	})
	require.Equal(t, 1, eventsConsumers(t, env))

	const n = 1500 // more than a follower's buffer
	publishEvents(t, env, n)
	// The feed hands each event to every follower before the next: the
	// fast one has them all, so the slow one's buffer overflowed.
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the fast follower handed every event", func() (bool, any) {
		got := len(fast.copy())
		return got == n, got
	})
	close(release)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the slow follower handed every event", func() (bool, any) {
		got := len(slow.copy())
		return got == n, got
	})
	require.Equal(t, seqRange(1, n), slow.copy())
	require.Equal(t, seqRange(1, n), fast.copy())
	// Caught up, the slow follower follows the feed again; its consumer
	// is deleted on a goroutine: wait for the count to settle.
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the feed's consumer only", func() (bool, any) {
		got := eventsConsumers(t, env)
		return got == 1, got
	})
	publishEvents(t, env, 10)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "both handed the ten more", func() (bool, any) {
		return len(slow.copy()) == n+10 && len(fast.copy()) == n+10, []int{len(slow.copy()), len(fast.copy())}
	})
	require.Equal(t, seqRange(1, n+10), slow.copy())
	require.Equal(t, 1, eventsConsumers(t, env), "the slow follower follows the feed")
}

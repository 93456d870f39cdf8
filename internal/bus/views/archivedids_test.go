package views_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestArchivedIDs_SaysWhichCallsTheArchiveMayHold: until it has read the
// archive's ids, every call may be there; then only those archived, those
// archived since, and those the bucket's watch showed purged before the
// archive showed them.
func TestArchivedIDs_SaysWhichCallsTheArchiveMayHold(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	archive := stores.NewArchive(env.JS, env.Buckets.Archive)
	put := func(id string) {
		t.Helper()
		require.NoError(t, archive.Put(ctx, wire.ArchivedCall{Entry: &machine.Entry{PendingID: id, Status: machine.StateCompletedSuccess}, Revision: 1}))
	}
	put("conv.before")

	ids := views.NewArchivedIDs(env.JS)
	assert.True(t, ids.MayHold("conv.new"), "anything, before the archive is read")
	apply, loaded := ids.View().Start()
	loaded()
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ids.Follow(fctx, bustest.Logger()) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	bustest.Eventually(t, 30*time.Second, 5*time.Millisecond, "the archive's ids read", func() (bool, any) {
		return !ids.MayHold("conv.new"), "conv.new may be archived"
	})
	assert.True(t, ids.MayHold("conv.before"), "archived before the follow began")

	put("conv.after")
	bustest.Eventually(t, 30*time.Second, 5*time.Millisecond, "a call archived since", func() (bool, any) {
		return ids.MayHold("conv.after"), "conv.after not known archived"
	})

	// The bucket's watch shows a call purged (retired) before the follow
	// shows it archived: it may be held meanwhile.
	apply(views.CallRevision{Key: "conv.retired", Revision: 9, Removed: true})
	assert.True(t, ids.MayHold("conv.retired"), "purged from the bucket, not yet seen archived")
	apply(views.CallRevision{Key: "conv.open", Revision: 10})
	assert.False(t, ids.MayHold("conv.open"), "a put says nothing of the archive")
}

// BenchmarkArchivedIDsLoad: the start-up read of the ids of 100k archived
// calls (10k with -short), each about 2 KB in the archive, against a raw
// read of the same stream with its messages (an ordered consumer) in the
// same run. It reports both reads' ms, their ratio (ids-x), and how
// often the ids wrongly say a call not archived may be (maybe-%: a
// lookup it costs a submit).
func BenchmarkArchivedIDsLoad(b *testing.B) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	env := bustest.Start(b, bustest.Topologies[0])
	body := []byte(`{"entry":{"status":"COMPLETED_SUCCESS","toolArguments":"` + strings.Repeat("x", 2000) + `"}}`)
	for i := range n {
		_, err := env.JS.PublishAsync(wire.ArchiveSubject(fmt.Sprintf("conv-%05d.toolu_%012d", i%5000, i)), body)
		require.NoError(b, err)
		if i%2000 == 1999 || i == n-1 {
			<-env.JS.PublishAsyncComplete()
		}
	}
	raw := func() time.Duration {
		start := time.Now()
		cons, err := env.JS.OrderedConsumer(b.Context(), wire.ArchiveStream, jetstream.OrderedConsumerConfig{})
		require.NoError(b, err)
		it, err := cons.Messages()
		require.NoError(b, err)
		defer it.Stop()
		for range n {
			_, err := it.Next()
			require.NoError(b, err)
		}
		return time.Since(start)
	}
	var wrong int
	load := func() time.Duration {
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		defer func() { cancel(); require.NoError(b, <-done) }()
		start := time.Now()
		ids := views.NewArchivedIDs(env.JS)
		go func() { done <- ids.Follow(ctx, bustest.Logger()) }()
		for ids.MayHold("conv.none") {
			if time.Since(start) > 5*time.Minute {
				b.Fatal("the ids were not read within 5 minutes")
			}
			time.Sleep(time.Millisecond)
		}
		d := time.Since(start)
		for i := range n {
			if ids.MayHold(fmt.Sprintf("conv-%05d.toolu_new_%08d", i%5000, i)) {
				wrong++
			}
		}
		return d
	}
	var rawD, idsD time.Duration
	b.ResetTimer()
	for range b.N {
		rawD += raw()
		idsD += load()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(rawD), "raw-ms")
	b.ReportMetric(ms(idsD), "ids-ms")
	b.ReportMetric(float64(idsD)/float64(rawD), "ids-x")
	b.ReportMetric(100*float64(wrong)/float64(b.N)/float64(n), "maybe-%")
}

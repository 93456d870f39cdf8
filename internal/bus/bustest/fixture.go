package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/wire"
)

// PutRaw writes n values straight into the tool_calls bucket's stream,
// value(i) under its key, asynchronously a few thousand at a time: a
// fixture of 100k entries in seconds, which writes through the machine
// would take minutes to make.
func PutRaw(t testing.TB, js jetstream.JetStream, n int, value func(i int) (key string, data []byte)) {
	t.Helper()
	PublishRaw(t, js, n, func(i int) (string, []byte) {
		key, data := value(i)
		return "$KV." + wire.CallsBucket + "." + key, data
	})
}

// PublishRaw publishes n messages to JetStream, value(i) on its subject,
// as PutRaw does, and waits until they are all stored.
func PublishRaw(t testing.TB, js jetstream.JetStream, n int, value func(i int) (subject string, data []byte)) {
	t.Helper()
	flush := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			t.Fatal("the fixture was not written within a minute")
		}
	}
	for i := range n {
		subject, data := value(i)
		_, err := js.PublishAsync(subject, data)
		require.NoError(t, err)
		if i%2000 == 1999 {
			flush()
		}
	}
	flush()
}

// FollowCalls runs x.Follow until the test ends, and waits until it has
// read the bucket; once stopped, x is no longer synced.
func FollowCalls(t testing.TB, x *views.CallIndex) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Follow(ctx, Logger()) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.False(t, x.Synced(), "stopped: no longer answering")
	})
	Eventually(t, 10*time.Second, 5*time.Millisecond, "the index read the bucket", func() (bool, any) { ok := x.Synced(); return ok, "not synced" })
}

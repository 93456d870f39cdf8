package consumer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/consumer"
)

// TestDurables_PositionsConsumersAndBounds: what the workers, the metrics
// and the analytics ask of JetStream beside a runner. A durable's position
// counts what it has not been delivered; Consumers hears of the durables
// there and of one created after it listed them; a durable deleted is no
// longer there, and deleting it again is no error; a publish with an id
// already stored is dropped.
func TestDurables_PositionsConsumersAndBounds(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	ctx := t.Context()
	_, err := consumer.NewRunner(env.JS, testConfig("a"), bustest.Logger(), nil).CreateConsumer(ctx)
	require.NoError(t, err)
	require.NoError(t, consumer.Publish(ctx, env.JS, jobSubject("a"), []byte("1"), map[string][]string{"X": {"y"}}, "job-1"))
	require.NoError(t, consumer.Publish(ctx, env.JS, jobSubject("a"), []byte("1"), nil, "job-1"))
	publish(t, env, jobSubject("a"), "2")

	first, last, err := consumer.Bounds(ctx, env.JS, jobsStream)
	require.NoError(t, err)
	assert.Equal(t, [2]uint64{1, 2}, [2]uint64{first, last}, "two messages: the repeated id was dropped")
	stream, err := env.JS.Stream(ctx, jobsStream)
	require.NoError(t, err)
	stored, err := stream.GetMsg(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, "y", stored.Header.Get("X"))

	positions, err := consumer.Durables(ctx, env.JS, jobsStream)
	require.NoError(t, err)
	require.Len(t, positions, 1)
	assert.Equal(t, "test-a", positions[0].Consumer)
	assert.Equal(t, uint64(2), positions[0].Pending)
	p, ok, err := consumer.Durable(ctx, env.JS, jobsStream, "test-a")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, positions[0], p)

	var mu sync.Mutex
	heard := map[string]bool{} // name: existing
	stop, err := consumer.Consumers(ctx, env.JS, jobsStream, func(name string, existing bool) {
		mu.Lock()
		defer mu.Unlock()
		heard[name] = existing
	})
	require.NoError(t, err)
	defer stop()
	_, err = consumer.NewRunner(env.JS, testConfig("b"), bustest.Logger(), nil).CreateConsumer(ctx)
	require.NoError(t, err)
	bustest.Eventually(t, 5*time.Second, 10*time.Millisecond, "both consumers heard of", func() (bool, any) {
		mu.Lock()
		defer mu.Unlock()
		existing, created := heard["test-a"], heard["test-b"]
		_, hasB := heard["test-b"]
		return existing && hasB && !created, heard
	})

	require.NoError(t, consumer.Delete(ctx, env.JS, jobsStream, "test-a"))
	_, ok, err = consumer.Durable(ctx, env.JS, jobsStream, "test-a")
	require.NoError(t, err)
	assert.False(t, ok, "deleted")
	assert.NoError(t, consumer.Delete(ctx, env.JS, jobsStream, "test-a"), "deleting what is not there")
}

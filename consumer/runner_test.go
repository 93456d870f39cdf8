package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/consumer"
	"github.com/toolgate/toolgate/wire"
)

// runRunner starts a runner over TOOL_WORK's tool.work.<tool> queue.
func runRunner(t *testing.T, env *bustest.Env, tool string, h consumer.Handler, mw ...consumer.Middleware) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := consumer.NewRunner(env.JS, consumer.ConsumerConfig{
		Stream:         wire.WorkStream,
		Durable:        "test-" + tool,
		FilterSubjects: []string{wire.WorkSubject(tool)},
		MaxDeliver:     3,
		Backoff:        []time.Duration{10 * time.Millisecond},
		AckWait:        time.Second,
	}, bustest.Logger(), h, mw...)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(cancel)
	return func() error { cancel(); return <-done }
}

func publish(t *testing.T, env *bustest.Env, subject, data string) {
	t.Helper()
	_, err := env.JS.Publish(t.Context(), subject, []byte(data))
	require.NoError(t, err)
}

func TestRunner_RetriesWithBackoffThenAcks(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	var calls atomic.Int32
	handled := make(chan string, 1)
	runRunner(t, env, "flaky", func(_ context.Context, msg jetstream.Msg) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		handled <- string(msg.Data())
		return nil
	})
	publish(t, env, wire.WorkSubject("flaky"), "job")
	select {
	case got := <-handled:
		assert.Equal(t, "job", got)
	case <-time.After(10 * time.Second):
		t.Fatal("handler never succeeded")
	}
	// Acked: the work queue empties and no dead letter is written.
	assertStreamMsgs(t, env, wire.WorkStream, 0)
	assertStreamMsgs(t, env, wire.DeadLetterStream, 0)
	assert.Equal(t, int32(3), calls.Load())
}

func TestRunner_DeadLettersAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	var dead, alive atomic.Int32
	runRunner(t, env, "mixed", func(_ context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) == "poison" {
			dead.Add(1)
			return errors.New("cannot parse poison")
		}
		alive.Add(1)
		return nil
	})
	publish(t, env, wire.WorkSubject("mixed"), "poison")
	for i := range 5 {
		publish(t, env, wire.WorkSubject("mixed"), fmt.Sprint("ok-", i))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, uint64(1), streamCount(t, env, wire.DeadLetterStream), "dead letters")
		assert.Equal(c, int32(5), alive.Load(), "the poison message held nothing up")
	}, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(3), dead.Load(), "tried MaxDeliver times")

	s, err := env.JS.Stream(t.Context(), wire.DeadLetterStream)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(t.Context(), wire.DeadLetterSubject("test-mixed"))
	require.NoError(t, err)
	assert.Equal(t, "poison", string(m.Data))
	assert.Equal(t, "cannot parse poison", m.Header.Get(consumer.HeaderDeadError))
	assert.Equal(t, wire.WorkSubject("mixed"), m.Header.Get(consumer.HeaderDeadSubject))
	assert.Equal(t, "3", m.Header.Get(consumer.HeaderDeadDeliveries))
	assertStreamMsgs(t, env, wire.WorkStream, 0)
}

func TestRunner_PermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	var calls atomic.Int32
	runRunner(t, env, "perm", func(context.Context, jetstream.Msg) error {
		calls.Add(1)
		return consumer.Permanent(errors.New("bad input"))
	})
	publish(t, env, wire.WorkSubject("perm"), "x")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, uint64(1), streamCount(t, env, wire.DeadLetterStream), "dead letters (handled %d times)", calls.Load())
	}, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(1), calls.Load())
}

func TestRunner_MiddlewareWrapsOutermostFirst(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	order := make(chan string, 3)
	tag := func(name string) consumer.Middleware {
		return func(next consumer.Handler) consumer.Handler {
			return func(ctx context.Context, msg jetstream.Msg) error {
				order <- name
				return next(ctx, msg)
			}
		}
	}
	runRunner(t, env, "mw", func(context.Context, jetstream.Msg) error { order <- "handler"; return nil }, tag("outer"), tag("inner"))
	publish(t, env, wire.WorkSubject("mw"), "x")
	for _, want := range []string{"outer", "inner", "handler"} {
		select {
		case got := <-order:
			assert.Equal(t, want, got)
		case <-time.After(10 * time.Second):
			t.Fatal("handler not called")
		}
	}
}

func TestRunner_StopWaitsForHandlerInFlight(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	started := make(chan struct{})
	var finished atomic.Bool
	stop := runRunner(t, env, "slow", func(ctx context.Context, _ jetstream.Msg) error {
		close(started)
		time.Sleep(200 * time.Millisecond) // work that ignores ctx
		finished.Store(true)
		return nil
	})
	publish(t, env, wire.WorkSubject("slow"), "x")
	<-started
	require.NoError(t, stop())
	assert.True(t, finished.Load(), "Run returned before its handler did")
}

func streamCount(t *testing.T, env *bustest.Env, stream string) uint64 {
	s, err := env.JS.Stream(t.Context(), stream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return info.State.Msgs
}

func assertStreamMsgs(t *testing.T, env *bustest.Env, stream string, want uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return streamCount(t, env, stream) == want }, 10*time.Second, 10*time.Millisecond, "%s should hold %d", stream, want)
}

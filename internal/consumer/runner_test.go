package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/wire"
)

// jobsStream is the tests' work queue: jobs.<tool>, one queue per tool.
const jobsStream = "JOBS"

func jobSubject(tool string) string { return "jobs." + tool }

// startEnv starts a server with toolgate's streams and the tests' queue.
func startEnv(t *testing.T) *bustest.Env {
	t.Helper()
	env := bustest.Start(t, bustest.Topologies[0])
	_, err := env.JS.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: jobsStream, Subjects: []string{jobSubject(">")}, Retention: jetstream.WorkQueuePolicy,
	})
	require.NoError(t, err)
	return env
}

// runRunner starts a runner over the tests' jobs.<tool> queue.
func runRunner(t *testing.T, env *bustest.Env, tool string, h consumer.Handler, mw ...consumer.Middleware) (stop func() error) {
	t.Helper()
	return runRunnerWith(t, env, testConfig(tool), h, mw...)
}

func testConfig(tool string) consumer.ConsumerConfig {
	return consumer.ConsumerConfig{
		Stream:         jobsStream,
		Durable:        "test-" + tool,
		FilterSubjects: []string{jobSubject(tool)},
		MaxDeliver:     3,
		Backoff:        []time.Duration{10 * time.Millisecond},
		AckWait:        time.Second,
	}
}

func runRunnerWith(t *testing.T, env *bustest.Env, cfg consumer.ConsumerConfig, h consumer.Handler, mw ...consumer.Middleware) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := consumer.NewRunner(env.JS, cfg, bustest.Logger(), h, mw...)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func publish(t *testing.T, env *bustest.Env, subject, data string) {
	t.Helper()
	_, err := env.JS.Publish(t.Context(), subject, []byte(data))
	require.NoError(t, err)
}

func TestRunner_RetriesWithBackoffThenAcks(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	var calls atomic.Int32
	handled := make(chan string, 1)
	runRunner(t, env, "flaky", func(_ context.Context, msg consumer.Msg) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		handled <- string(msg.Data())
		return nil
	})
	publish(t, env, jobSubject("flaky"), "job")
	select {
	case got := <-handled:
		assert.Equal(t, "job", got)
	case <-time.After(10 * time.Second):
		t.Fatal("handler never succeeded")
	}
	// Acked: the work queue empties and no dead letter is written.
	assertStreamMsgs(t, env, jobsStream, 0)
	assertStreamMsgs(t, env, wire.DeadLetterStream, 0)
	assert.Equal(t, int32(3), calls.Load())
}

func TestRunner_DeadLettersAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	var dead, alive atomic.Int32
	runRunner(t, env, "mixed", func(_ context.Context, msg consumer.Msg) error {
		if string(msg.Data()) == "poison" {
			dead.Add(1)
			return errors.New("cannot parse poison")
		}
		alive.Add(1)
		return nil
	})
	publish(t, env, jobSubject("mixed"), "poison")
	for i := range 5 {
		publish(t, env, jobSubject("mixed"), fmt.Sprint("ok-", i))
	}
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the poison message dead-lettered, the five others handled", func() (bool, any) {
		n, ok := streamCount(t, env, wire.DeadLetterStream), alive.Load()
		return n == 1 && ok == 5, fmt.Sprintf("%d dead letters, %d handled", n, ok)
	})
	assert.Equal(t, int32(3), dead.Load(), "tried MaxDeliver times")

	s, err := env.JS.Stream(t.Context(), wire.DeadLetterStream)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(t.Context(), wire.DeadLetterSubject("test-mixed"))
	require.NoError(t, err)
	assert.Equal(t, "poison", string(m.Data))
	assert.Equal(t, "cannot parse poison", m.Header.Get(consumer.HeaderDeadError))
	assert.Equal(t, jobSubject("mixed"), m.Header.Get(consumer.HeaderDeadSubject))
	assert.Equal(t, "3", m.Header.Get(consumer.HeaderDeadDeliveries))
	assertStreamMsgs(t, env, jobsStream, 0)
}

func TestRunner_PermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	var calls atomic.Int32
	runRunner(t, env, "perm", func(context.Context, consumer.Msg) error {
		calls.Add(1)
		return consumer.Permanent(errors.New("bad input"))
	})
	publish(t, env, jobSubject("perm"), "x")
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "one dead letter", func() (bool, any) {
		n := streamCount(t, env, wire.DeadLetterStream)
		return n == 1, fmt.Sprintf("%d dead letters (handled %d times)", n, calls.Load())
	})
	assert.Equal(t, int32(1), calls.Load())
}

func TestRunner_MiddlewareWrapsOutermostFirst(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	order := make(chan string, 3)
	tag := func(name string) consumer.Middleware {
		return func(next consumer.Handler) consumer.Handler {
			return func(ctx context.Context, msg consumer.Msg) error {
				order <- name
				return next(ctx, msg)
			}
		}
	}
	runRunner(t, env, "mw", func(context.Context, consumer.Msg) error { order <- "handler"; return nil }, tag("outer"), tag("inner"))
	publish(t, env, jobSubject("mw"), "x")
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
	env := startEnv(t)
	started := make(chan struct{})
	var finished atomic.Bool
	stop := runRunner(t, env, "slow", func(ctx context.Context, _ consumer.Msg) error {
		close(started)
		time.Sleep(200 * time.Millisecond) // work that ignores ctx
		finished.Store(true)
		return nil
	})
	publish(t, env, jobSubject("slow"), "x")
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
	bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, fmt.Sprintf("%s holds %d", stream, want), func() (bool, any) { n := streamCount(t, env, stream); return n == want, n })
}

// deliveries records when each delivery of a message reached the handler.
type deliveries struct {
	mu sync.Mutex
	at []time.Time
}

func (d *deliveries) add() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = append(d.at, time.Now())
	return len(d.at)
}

func (d *deliveries) gaps() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(d.at); i++ {
		g = append(g, d.at[i].Sub(d.at[i-1]))
	}
	return g
}

func TestRunner_RetryAfterDelaysTheRedelivery(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	var d deliveries
	acked := make(chan struct{})
	runRunner(t, env, "busy", func(context.Context, consumer.Msg) error {
		if d.add() == 1 {
			return consumer.RetryAfter(errors.New("429 Too Many Requests"), 700*time.Millisecond)
		}
		close(acked)
		return nil
	})
	publish(t, env, jobSubject("busy"), "x")
	select {
	case <-acked:
	case <-time.After(10 * time.Second):
		t.Fatal("never retried")
	}
	gaps := d.gaps()
	require.Len(t, gaps, 1)
	assert.GreaterOrEqual(t, gaps[0], 700*time.Millisecond, "the retry waited as asked, not the 10ms backoff")
	assertStreamMsgs(t, env, jobsStream, 0)
}

func TestRunner_RetryAfterIsCappedAndNeverShortensTheBackoff(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	cfg := testConfig("capped")
	cfg.Backoff = []time.Duration{400 * time.Millisecond}
	cfg.MaxRetryAfter = 50 * time.Millisecond
	cfg.MaxDeliver = 3
	var d deliveries
	runRunnerWith(t, env, cfg, func(context.Context, consumer.Msg) error {
		switch d.add() {
		case 1:
			return consumer.RetryAfter(errors.New("503"), time.Hour) // capped to 50ms, then the 400ms backoff wins
		case 2:
			return consumer.RetryAfter(errors.New("429"), time.Millisecond) // shorter than the backoff
		}
		return nil
	})
	publish(t, env, jobSubject("capped"), "x")
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "two retries", func() (bool, any) { gaps := d.gaps(); return len(gaps) == 2, gaps })
	for i, g := range d.gaps() {
		assert.GreaterOrEqual(t, g, 400*time.Millisecond, "retry %d", i+1)
		assert.Less(t, g, 5*time.Second, "retry %d: an hour was asked, the cap holds", i+1)
	}
	assertStreamMsgs(t, env, wire.DeadLetterStream, 0)
}

func TestRunner_RetryAfterCountsTowardsMaxDeliver(t *testing.T) {
	t.Parallel()
	env := startEnv(t)
	var calls atomic.Int32
	cfg := testConfig("throttled")
	cfg.DeadLetter = consumer.DeadLetterConfig{
		Subject: wire.DeadLetterSubject("shared"),
		Header: func(msg consumer.Msg, cause error) map[string][]string {
			return map[string][]string{"Extra": []string{string(msg.Data()) + "/" + strings.ToUpper(cause.Error())}}
		},
	}
	runRunnerWith(t, env, cfg, func(context.Context, consumer.Msg) error {
		calls.Add(1)
		return consumer.RetryAfter(errors.New("slow\r\ndown"), time.Millisecond)
	})
	publish(t, env, jobSubject("throttled"), "x")
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "one dead letter", func() (bool, any) {
		n := streamCount(t, env, wire.DeadLetterStream)
		return n == 1, fmt.Sprintf("%d dead letters", n)
	})
	assert.Equal(t, int32(3), calls.Load())
	s, err := env.JS.Stream(t.Context(), wire.DeadLetterStream)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(t.Context(), wire.DeadLetterSubject("shared"))
	require.NoError(t, err, "on the configured subject")
	assert.Equal(t, "x/SLOW DOWN", strings.Join(strings.Fields(m.Header.Get("Extra")), " "))
	assert.Equal(t, "slow down", m.Header.Get(consumer.HeaderDeadError), "one line")
	assert.Equal(t, "test-throttled", m.Header.Get(consumer.HeaderDeadConsumer))
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	assert.NoError(t, consumer.RetryAfter(nil, time.Second))
	base := errors.New("429")
	err := fmt.Errorf("send: %w", consumer.RetryAfter(base, 3*time.Second))
	d, ok := consumer.RetryDelay(err)
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d)
	assert.ErrorIs(t, err, base)
	assert.Equal(t, "send: 429", err.Error())
	_, ok = consumer.RetryDelay(base)
	assert.False(t, ok)
	assert.True(t, consumer.IsPermanent(fmt.Errorf("x: %w", consumer.Permanent(base))))
	assert.False(t, consumer.IsPermanent(err))
}

func TestRunRestarting(t *testing.T) {
	t.Parallel()
	t.Run("restarts after a failure, stops with ctx", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		var runs atomic.Int32
		err := consumer.RunRestarting(ctx, bustest.Logger(), "test", func(context.Context) error {
			if runs.Add(1) == 3 {
				cancel()
				return errors.New("stopping")
			}
			return errors.New("flaky")
		})
		assert.NoError(t, err)
		assert.Equal(t, int32(3), runs.Load())
	})
	t.Run("a permanent error ends it, unwrapped", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		var runs atomic.Int32
		err := consumer.RunRestarting(t.Context(), bustest.Logger(), "test", func(context.Context) error {
			if runs.Add(1) == 2 {
				return consumer.Permanent(boom)
			}
			return errors.New("flaky")
		})
		assert.Same(t, boom, err)
	})
	t.Run("waiting out the backoff ends with ctx", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		var tries atomic.Int32
		go func() {
			done <- consumer.RunRestarting(ctx, bustest.Logger(), "test", func(context.Context) error { tries.Add(1); return errors.New("down") })
		}()
		bustest.Eventually(t, 5*time.Second, time.Millisecond, "a first try failed: the backoff is under way", func() (bool, any) {
			n := tries.Load()
			return n > 0, n
		})
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("still waiting after ctx ended")
		}
	})
}

// Not parallel: it counts every goroutine of the package's runners, and
// runs before the parallel tests start theirs.
func TestRunner_RunLeavesNothingRunning(t *testing.T) {
	env := startEnv(t)
	cfg := testConfig("owned")
	cfg.Concurrency = 4
	cfg.AckWait = 300 * time.Millisecond // the in-progress ticker ticks
	release := make(chan struct{})
	var started atomic.Int32
	stop := runRunnerWith(t, env, cfg, func(ctx context.Context, _ consumer.Msg) error {
		started.Add(1)
		<-release
		return errors.New("retry me")
	})
	for i := range 4 {
		publish(t, env, jobSubject("owned"), fmt.Sprint(i))
	}
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the four messages started", func() (bool, any) { n := started.Load(); return n == 4, n })
	assert.NotEmpty(t, goroutinesIn("toolgate/internal/consumer.(*Runner)"))
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	require.NoError(t, stop())
	assert.Empty(t, goroutinesIn("toolgate/internal/consumer.(*Runner)"), "Run returned with goroutines of its own still running")
}

// goroutinesIn returns the stacks of the goroutines with a frame whose
// function name contains fn.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			found = append(found, g)
		}
	}
	return found
}

func TestRetry(t *testing.T) {
	t.Parallel()
	t.Run("tries again until it succeeds", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		err := consumer.Retry(t.Context(), bustest.Logger(), "test", func(context.Context) error {
			if runs.Add(1) < 3 {
				return errors.New("leader election")
			}
			return nil
		})
		assert.NoError(t, err)
		assert.Equal(t, int32(3), runs.Load(), "done at the first success")
	})
	t.Run("a permanent error ends it, unwrapped", func(t *testing.T) {
		t.Parallel()
		refused := errors.New("refused")
		var runs atomic.Int32
		err := consumer.Retry(t.Context(), bustest.Logger(), "test", func(context.Context) error {
			runs.Add(1)
			return consumer.Permanent(refused)
		})
		assert.Same(t, refused, err)
		assert.Equal(t, int32(1), runs.Load())
	})
	t.Run("ctx ending ends it with ctx's error", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		err := consumer.Retry(ctx, bustest.Logger(), "test", func(context.Context) error {
			cancel()
			return errors.New("unreachable")
		})
		assert.ErrorIs(t, err, context.Canceled)
	})
}

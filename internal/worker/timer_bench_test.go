package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// These benchmarks measure how late deadlines fire: 10,000 of them, spread
// evenly over 5 seconds (2,000 a second; see below), on one embedded server. Lateness
// is the time from a deadline to the moment its action is done.
//
// BenchmarkTimer is the Timer as it runs in serve: relay and timer up, the
// calls submitted through the machine (the timer learns their deadlines
// from the process's feed of the bucket, which keeps the call index too),
// and the action is the Expire transition, a compare-and-set on the entry
// from the index's revision; lateness ends when that write has won.
// It runs with no other call pending, and with 100k pending calls whose
// deadlines are a day away (written into the bucket before the timer
// starts, so that it holds them all).
//
// BenchmarkMsgSchedules is the alternative the Timer did not take:
// JetStream message schedules (nats-server 2.12+), one "@at" schedule per
// deadline on a stream with AllowMsgSchedules. Lateness ends when a
// consumer receives the message the server publishes at the deadline,
// before any action: a lower bound for a timer built on schedules.
//
// Each reports p50, p99 and max lateness in ms. BenchmarkTimer also
// reports the raw KV compare-and-set rate measured on the same server
// right after, as bus/bench_test.go does, since one firing is an Expire
// (a CAS, after a read when the index is behind) and the rate a server sustains bounds how many
// deadlines a second it can keep up with. ns/op means nothing here.
//
// TOOLGATE_BENCH_TIMER_SPREAD spreads the deadlines over another
// duration: on a loaded machine the submitter cannot write 2,000 calls a
// second before their deadlines (TOOLGATE_BENCH_TIMER_SPREAD=40s: 250).

const (
	benchDeadlines = 10_000
	// benchLead is how far ahead the first deadline is when submitting
	// starts; every call is written before its deadline (the benchmark
	// fails if one is not), so none fires on arrival.
	benchLead = 3 * time.Second
)

// benchSpread is how long the deadlines are spread over.
var benchSpread = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("TOOLGATE_BENCH_TIMER_SPREAD")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Second
}()

// lateness collects how late each deadline fired.
type lateness struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *lateness) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *lateness) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.d)
	at := func(q float64) float64 {
		return float64(l.d[min(int(q*float64(len(l.d))), len(l.d)-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(at(1), "max-ms")
}

// deadlineTimes spreads n deadlines evenly over benchSpread from first.
func deadlineTimes(first time.Time) []time.Time {
	due := make([]time.Time, benchDeadlines)
	for i := range due {
		due[i] = first.Add(benchSpread * time.Duration(i) / benchDeadlines)
	}
	return due
}

func BenchmarkTimer(b *testing.B) {
	for _, pending := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("pending=%dk", pending/1000), func(b *testing.B) {
			if pending > 0 && testing.Short() {
				b.Skip("writes 100k entries")
			}
			benchTimer(b, pending)
		})
	}
}

func benchTimer(b *testing.B, pending int) {
	var late lateness
	var casPerSec float64
	for range b.N {
		env := bustest.Start(b, bustest.Topology{Name: "single", Replicas: 1})
		aDayAway := time.Now().Add(24 * time.Hour).UnixMilli()
		bustest.PutRaw(b, env.JS, pending, func(i int) (string, []byte) {
			e := machine.Entry{PendingID: machine.PendingID(fmt.Sprintf("bg-%03d", i%1000), fmt.Sprintf("call-%06d", i)),
				ToolName: "send_email", ToolArguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed"}`),
				CallerBotID: "agent", Status: machine.StatePendingApproval, ApprovalTimeoutAt: aDayAway, AutoRejectOnTimeout: true,
				LastTransition: &machine.Transition{Event: machine.EventAsk, To: machine.StatePendingApproval, Actor: "policy", At: time.Now().UnixMilli()}}
			data, err := json.Marshal(e)
			require.NoError(b, err)
			return e.PendingID, data
		})
		ctx, stop := context.WithCancel(context.Background())
		var running sync.WaitGroup
		running.Go(func() {
			if err := relay.NewRelay(env.JS, relay.RelayConfig{}, bustest.Logger()).Run(ctx); err != nil {
				b.Errorf("relay: %v", err)
			}
		})
		var fired atomic.Int64
		firings := map[string]int{}
		var firingsMu sync.Mutex
		// The timer's machine reports each Expire that won, when it won.
		// As in serve, the process's one feed of tool_calls keeps the call
		// index beside the timer's deadlines, and an Expire starts from
		// the index's revision of the call rather than reading it first.
		feed, index := views.NewCallsFeed(env.JS, env.KV), views.NewCallIndex(env.JS, env.KV)
		timerMachine := machine.New(bus.NewKVStore(env.JS, env.KV).WithIndex(index), machine.WithObserver(func(_ context.Context, e *machine.Entry) {
			if e.Status != machine.StateRejectedByTimeout {
				return
			}
			late.add(time.Since(time.UnixMilli(e.ApprovalTimeoutAt)))
			firingsMu.Lock()
			firings[e.PendingID]++
			firingsMu.Unlock()
			fired.Add(1)
		}))
		timer := worker.NewTimer(env.Conn, env.Buckets, timerMachine, bustest.Logger(), worker.WithFeed(feed))
		feed.Add(index.View(bustest.Logger()))
		running.Go(func() {
			if err := timer.Run(ctx); err != nil {
				b.Errorf("timer: %v", err)
			}
		})
		running.Go(func() { _ = feed.Run(ctx, bustest.Logger()) })
		// Deadlines as they come, not those of a timer still reading the
		// pending calls (BenchmarkTimerRestart measures that).
		select {
		case <-timer.Loaded():
		case <-time.After(time.Minute):
			b.Fatal("the timer did not read the bucket within a minute")
		}

		due := deadlineTimes(time.Now().Add(benchLead))
		byCall := make(map[string]time.Time, len(due))
		for i, at := range due {
			byCall[fmt.Sprintf("call-%05d", i)] = at
		}
		submitter := machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(_ context.Context, c machine.Call) (machine.Verdict, error) {
			return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Until(byCall[c.ToolCallID]), AutoRejectOnTimeout: true}, nil
		})))
		var next atomic.Int64
		var tooLate atomic.Int64
		g := new(errgroup.Group)
		for range 32 {
			g.Go(func() error {
				for i := int(next.Add(1) - 1); i < len(due); i = int(next.Add(1) - 1) {
					call := machine.Call{ToolCallID: fmt.Sprintf("call-%05d", i), ToolName: "send_email", Arguments: json.RawMessage(`{"to":"ops@example.com"}`), CallerBotID: "agent", ConversationID: fmt.Sprintf("conv-%03d", i%64)}
					if _, err := submitter.Submit(ctx, call); err != nil {
						return err
					}
					if time.Now().After(due[i]) {
						tooLate.Add(1)
					}
				}
				return nil
			})
		}
		require.NoError(b, g.Wait())
		require.Zero(b, tooLate.Load(), "calls written after their deadline: raise benchLead")

		bustest.Eventually(b, benchLead+benchSpread+time.Minute, 10*time.Millisecond, "every deadline fired", func() (bool, any) {
			n := fired.Load()
			return n >= benchDeadlines, n
		})
		// Room for a second firing, which must not come.
		time.Sleep(500 * time.Millisecond)
		stop()
		running.Wait()
		firingsMu.Lock()
		require.Len(b, firings, benchDeadlines)
		for id, n := range firings {
			require.Equal(b, 1, n, id)
		}
		firingsMu.Unlock()
		events, err := env.JS.Stream(context.Background(), wire.EventsStream)
		require.NoError(b, err)
		info, err := events.Info(context.Background(), jetstream.WithSubjectFilter(wire.SubjectApprovalTimeout))
		require.NoError(b, err)
		require.Equal(b, uint64(benchDeadlines), info.State.Subjects[wire.SubjectApprovalTimeout], "one timeout event per deadline")

		casPerSec = casRate(b, env)
	}
	late.report(b)
	b.ReportMetric(casPerSec, "cas/s")
}

// casRate is the raw compare-and-set rate of the bucket: kv.Update at a
// known revision of an entry-sized value, 32 goroutines on keys of their
// own, for about a second.
func casRate(b *testing.B, env *bustest.Env) float64 {
	b.Helper()
	ctx := context.Background()
	value := make([]byte, 650)
	const workers, keysEach = 32, 16
	var ops atomic.Int64
	deadline := time.Now().Add(time.Second)
	start := time.Now()
	g := new(errgroup.Group)
	for w := range workers {
		g.Go(func() error {
			revs := make([]uint64, keysEach)
			keys := make([]string, keysEach)
			for k := range keys {
				keys[k] = fmt.Sprintf("cas-%02d.key-%02d", w, k)
				rev, err := env.KV.Create(ctx, keys[k], value)
				if err != nil {
					return err
				}
				revs[k] = rev
			}
			for i := 0; time.Now().Before(deadline); i = (i + 1) % keysEach {
				rev, err := env.KV.Update(ctx, keys[i], value, revs[i])
				if err != nil {
					return err
				}
				revs[i] = rev
				ops.Add(1)
			}
			return nil
		})
	}
	require.NoError(b, g.Wait())
	return float64(ops.Load()) / time.Since(start).Seconds()
}

// BenchmarkMsgSchedules measures the alternative: the server fires each
// deadline as a scheduled message. nats.go's StreamConfig has no field for
// AllowMsgSchedules yet, so the stream is created through the raw API.
func BenchmarkMsgSchedules(b *testing.B) {
	var late lateness
	for range b.N {
		env := bustest.Start(b, bustest.Topology{Name: "single", Replicas: 1})
		ctx := context.Background()
		cfg, _ := json.Marshal(map[string]any{
			"name":                "DEADLINES",
			"subjects":            []string{"deadline.schedule.>", "deadline.fired.>"},
			"storage":             "file",
			"allow_msg_schedules": true,
		})
		resp, err := env.NC.Request("$JS.API.STREAM.CREATE.DEADLINES", cfg, 10*time.Second)
		require.NoError(b, err)
		var created struct {
			Error *struct{ Description string } `json:"error"`
		}
		require.NoError(b, json.Unmarshal(resp.Data, &created))
		require.Nil(b, created.Error, "create stream: %s", resp.Data)

		cons, err := env.JS.OrderedConsumer(ctx, "DEADLINES", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"deadline.fired.>"}})
		require.NoError(b, err)
		var received atomic.Int64
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			var at time.Time
			if err := at.UnmarshalText(msg.Data()); err != nil {
				b.Errorf("fired message %q: %v", msg.Data(), err)
				return
			}
			late.add(time.Since(at))
			received.Add(1)
		})
		require.NoError(b, err)

		due := deadlineTimes(time.Now().Add(benchLead))
		var acks []jetstream.PubAckFuture
		wait := func() {
			for _, fut := range acks {
				select {
				case <-fut.Ok():
				case err := <-fut.Err():
					b.Fatalf("schedule: %v", err)
				}
			}
			acks = acks[:0]
		}
		for i, at := range due {
			if len(acks) == 1000 {
				wait() // nats.go stalls beyond 4,000 in flight
			}
			stamp, _ := at.UTC().MarshalText() // RFC 3339 with nanoseconds
			msg := nats.NewMsg(fmt.Sprintf("deadline.schedule.%05d", i))
			msg.Data = stamp
			msg.Header.Set("Nats-Schedule", "@at "+string(stamp))
			msg.Header.Set("Nats-Schedule-Target", fmt.Sprintf("deadline.fired.%05d", i))
			fut, err := env.JS.PublishMsgAsync(msg)
			require.NoError(b, err)
			acks = append(acks, fut)
		}
		wait()
		require.True(b, time.Now().Before(due[0]), "schedules written after the first deadline: raise benchLead")
		bustest.Eventually(b, benchLead+benchSpread+time.Minute, 10*time.Millisecond, "every schedule received", func() (bool, any) {
			n := received.Load()
			return n >= benchDeadlines, n
		})
		time.Sleep(500 * time.Millisecond)
		cc.Stop()
		require.Equal(b, int64(benchDeadlines), received.Load(), "each schedule fires once")
	}
	late.report(b)
}

// BenchmarkTimerRestart is the other half of the heap's cost: the timer
// starts on a bucket of 10,000 calls whose deadlines all passed while no
// timer ran. It reads the bucket, rebuilds the heap and expires them all;
// "drain-ms" is from Run's start to the last Expire, "fired/s" the rate.
func BenchmarkTimerRestart(b *testing.B) {
	var drain time.Duration
	for range b.N {
		env := bustest.Start(b, bustest.Topology{Name: "single", Replicas: 1})
		ctx, stop := context.WithCancel(context.Background())
		var running sync.WaitGroup
		running.Go(func() {
			if err := relay.NewRelay(env.JS, relay.RelayConfig{}, bustest.Logger()).Run(ctx); err != nil {
				b.Errorf("relay: %v", err)
			}
		})
		submitter := machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
			return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Millisecond, AutoRejectOnTimeout: true}, nil
		})))
		g := new(errgroup.Group)
		g.SetLimit(32)
		for i := range benchDeadlines {
			g.Go(func() error {
				_, err := submitter.Submit(ctx, machine.Call{ToolCallID: fmt.Sprintf("call-%05d", i), ToolName: "send_email", CallerBotID: "agent", ConversationID: fmt.Sprintf("conv-%03d", i%64)})
				return err
			})
		}
		require.NoError(b, g.Wait())

		var fired atomic.Int64
		timerMachine := machine.New(env.Store, machine.WithObserver(func(context.Context, *machine.Entry) { fired.Add(1) }))
		b.ResetTimer()
		start := time.Now()
		running.Go(func() {
			if err := worker.NewTimer(env.Conn, env.Buckets, timerMachine, bustest.Logger()).Run(ctx); err != nil {
				b.Errorf("timer: %v", err)
			}
		})
		bustest.Eventually(b, time.Minute, time.Millisecond, "every deadline fired", func() (bool, any) { n := fired.Load(); return n >= benchDeadlines, n })
		drain += time.Since(start)
		b.StopTimer()
		stop()
		running.Wait()
	}
	b.ReportMetric(float64(drain.Milliseconds())/float64(b.N), "drain-ms")
	b.ReportMetric(float64(benchDeadlines*b.N)/drain.Seconds(), "fired/s")
}

// BenchmarkTimer_RetireBacklog is a restart after a long outage: the
// timer starts on a bucket of 10,000 finished calls whose retention
// window ended an hour ago, and retires them all (bucketRetirer: a read
// and a purge each, as gate's Retire less its archiving). "drain-ms" is
// from Run's start to the last retirement, "retired/s" the rate.
func BenchmarkTimer_RetireBacklog(b *testing.B) {
	const n = 10_000
	var drain time.Duration
	for range b.N {
		env := bustest.Start(b, bustest.Topology{Name: "single", Replicas: 1})
		finishedAt := time.Now().Add(-2 * time.Hour).UnixMilli()
		bustest.PutRaw(b, env.JS, n, func(i int) (string, []byte) {
			e := machine.Entry{PendingID: machine.PendingID(fmt.Sprintf("conv-%03d", i%1000), fmt.Sprintf("call-%06d", i)),
				ToolName: "send_email", ToolArguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed"}`),
				CallerBotID: "agent", Status: machine.StateCompletedSuccess, Result: json.RawMessage(`{"ok":true}`),
				LastTransition: &machine.Transition{Event: machine.EventSucceed, To: machine.StateCompletedSuccess, Actor: "executor", At: finishedAt + int64(i)}}
			data, err := json.Marshal(e)
			require.NoError(b, err)
			return e.PendingID, data
		})
		r := &bucketRetirer{store: env.Store}
		ctx, stop := context.WithCancel(context.Background())
		var running sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		running.Go(func() {
			if err := worker.NewTimer(env.Conn, env.Buckets, machine.New(env.Store), bustest.Logger(), worker.WithRetention(time.Hour, r)).Run(ctx); err != nil {
				b.Errorf("timer: %v", err)
			}
		})
		bustest.Eventually(b, 5*time.Minute, time.Millisecond, "every call retired", func() (bool, any) {
			retired := r.retired.Load()
			return retired >= n, retired
		})
		drain += time.Since(start)
		b.StopTimer()
		stop()
		running.Wait()
	}
	b.ReportMetric(float64(drain.Milliseconds())/float64(b.N), "drain-ms")
	b.ReportMetric(float64(n*b.N)/drain.Seconds(), "retired/s")
}

// bucketRetirer retires a call from the bucket as gate's Retire does,
// without archiving it: it reads the entry, refuses (a conflict) one not
// finished after ago, and purges the key at the revision it read.
type bucketRetirer struct {
	store   *bus.KVStore
	now     func() time.Time // nil: time.Now
	retired atomic.Int64
}

func (r *bucketRetirer) Retire(ctx context.Context, id string, after time.Duration) error {
	e, rev, err := r.store.Get(ctx, id)
	if err != nil {
		return err
	}
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	if !e.Status.Terminal() || e.LastTransition == nil || now().Sub(time.UnixMilli(e.LastTransition.At)) < after {
		return fmt.Errorf("retire %s: %w: it is %s, not finished %s ago", id, machine.ErrConflict, e.Status, after)
	}
	if err := r.store.Retire(ctx, id, rev, time.Hour); err != nil {
		return err
	}
	r.retired.Add(1)
	return nil
}

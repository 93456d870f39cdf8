package analytics_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkApply measures the analytics subscriber taking in b.N events
// of approval lifecycles (approval_required, approval_granted,
// execution_started, execution_succeeded: real events, published by the
// relay, their entries as big as the relay makes them), against raw KV
// compare-and-sets of 600-byte values by 32 writers on the same server,
// measured in the same run before and after. The server is in this
// process, so the CPU time is the subscriber's and the server's.
//
//   - backlog: every event is in the stream before the subscriber starts
//     (a rebuild, or a restart after an outage): full batches.
//   - live: 500 approval lifecycles a second (liveLifecyclesPerSec,
//     about what toolgate bench's approval path makes) are published
//     while the subscriber runs, each waiting for the stream's
//     acknowledgement: the batches are what arrives meanwhile. Its time
//     is the pace's; its CPU and messages are the figures.
//
// Reported: time per event over time per CAS (cas-per-event: how many
// CAS an event costs; backlog only), CPU per event over CPU per CAS
// (cpu-ratio; live includes the publishers'), the
// server's messages (in and out) per event, the events per batch, and
// the CPU per event.
//
//	go test -run '^$' -bench Apply -benchtime 8000x ./analytics
func BenchmarkApply(b *testing.B) {
	for _, mode := range []string{"backlog", "live"} {
		b.Run(mode, func(b *testing.B) { benchApply(b, mode) })
	}
}

// liveLifecyclesPerSec paces BenchmarkApply/live.
const liveLifecyclesPerSec = 500

func benchApply(b *testing.B, mode string) {
	env := bustest.Start(b, bustest.Topologies[0])
	ctx := b.Context()
	events := lifecycleEvents(b, env)

	cas, err := env.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_cas", Storage: jetstream.FileStorage})
	require.NoError(b, err)
	casTime1, casCPU1 := benchCAS(b, cas, b.N)

	publish := func(i int) {
		ev := events[i%len(events)]
		if _, err := env.JS.Publish(ctx, ev.subject, ev.data); err != nil {
			b.Error(err)
		}
	}
	// publishAll publishes b.N events, 32 publishers at once, a lifecycle's
	// events in order as the relay publishes them; paced, lifecycle l no
	// sooner than l/perSec after the start.
	publishAll := func(perSec float64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 32 {
			wg.Go(func() {
				for l := next.Add(1) - 1; l*4 < int64(b.N); l = next.Add(1) - 1 {
					if perSec > 0 {
						time.Sleep(time.Until(start.Add(time.Duration(float64(l) / perSec * float64(time.Second)))))
					}
					for i := l * 4; i < min(l*4+4, int64(b.N)); i++ {
						publish(int(i))
					}
				}
			})
		}
		wg.Wait()
	}
	if mode == "backlog" {
		publishAll(0)
	}

	_, js := bustest.Connect(b, env.URLs)
	a, err := analytics.Open(ctx, bus.NewConn(js), analytics.Config{Log: bustest.Logger()})
	require.NoError(b, err)
	var applied, batches atomic.Int64
	all := make(chan struct{})
	analytics.CrashAfterApply(a, func(seqs []uint64) error {
		batches.Add(1)
		if applied.Add(int64(len(seqs))) == int64(b.N) {
			close(all)
		}
		return nil
	})

	msgs0, cpu0 := serverMessages(env), bustest.CPUTime()
	b.ResetTimer()
	start := time.Now()
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	if mode == "live" {
		publishAll(liveLifecyclesPerSec)
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("the analytics applied %d of %d events in 5 minutes", applied.Load(), b.N)
	}
	took, cpu, msgs := time.Since(start), bustest.CPUTime()-cpu0, serverMessages(env)-msgs0
	b.StopTimer()
	stop()
	require.NoError(b, <-done)

	casTime2, casCPU2 := benchCAS(b, cas, b.N)
	casNs := float64((casTime1 + casTime2).Nanoseconds()) / float64(2*b.N)
	casCPU := float64((casCPU1 + casCPU2).Nanoseconds()) / float64(2*b.N)
	eventNs := float64(took.Nanoseconds()) / float64(b.N)
	eventCPU := float64(cpu.Nanoseconds()) / float64(b.N)
	b.ReportMetric(eventNs, "ns/op")
	if mode == "backlog" {
		b.ReportMetric(eventNs/casNs, "cas-per-event")
	}
	b.ReportMetric(eventCPU/casCPU, "cpu-ratio")
	b.ReportMetric(eventCPU/1000, "cpu-µs/event")
	b.ReportMetric(float64(msgs)/float64(b.N), "msgs/event")
	b.ReportMetric(float64(applied.Load())/float64(max(batches.Load(), 1)), "events/batch")
}

// benchSigner signs receipts, as every toolgate process does: an event
// carries its transition's.
type benchSigner struct{ key ed25519.PrivateKey }

func (s benchSigner) PublicKey() string {
	return "ed25519:" + base64.RawURLEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
}

func (s benchSigner) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.key, msg), nil }

type benchEvent struct {
	subject string
	data    []byte
}

// lifecycleEvents runs approval lifecycles through a Machine and the relay
// and returns their events, in stream order; then empties the stream.
func lifecycleEvents(b *testing.B, env *bustest.Env) []benchEvent {
	b.Helper()
	ctx := b.Context()
	bustest.RunRelay(b, env.JS)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(b, err)
	m := machine.New(env.Store, machine.WithEvaluator(evaluator), machine.WithSigner(benchSigner{key}))
	const lifecycles = 8
	for i := range lifecycles {
		e, err := m.Submit(ctx, machine.Call{
			ToolCallID: fmt.Sprint("bench-", i), ToolName: "web_search", Team: "research", CallerBotID: "agent",
			ConversationID: "conv-research", Arguments: []byte(`{"query":"how do JetStream consumers acknowledge messages","limit":10}`),
		})
		require.NoError(b, err)
		_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: approvers[i%len(approvers)], Reason: "fine"})
		require.NoError(b, err)
		_, err = m.Claim(ctx, e.PendingID, "exec", time.Minute)
		require.NoError(b, err)
		_, err = m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec", Cost: 0.25, Result: []byte(`{"results":["a","b","c"]}`)})
		require.NoError(b, err)
	}
	bustest.WaitRelayed(b, env.JS)
	s, err := env.JS.Stream(ctx, wire.EventsStream)
	require.NoError(b, err)
	var out []benchEvent
	for seq := uint64(1); len(out) < 4*lifecycles; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		require.NoError(b, err)
		out = append(out, benchEvent{msg.Subject, msg.Data})
	}
	require.NoError(b, s.Purge(ctx))
	return out
}

// benchCAS makes n compare-and-sets of 600-byte values, 32 writers each
// on a key of its own, and says how long they took and the CPU spent.
func benchCAS(b *testing.B, kv jetstream.KeyValue, n int) (time.Duration, time.Duration) {
	b.Helper()
	value := make([]byte, 600)
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0, start := bustest.CPUTime(), time.Now()
	for w := range 32 {
		wg.Go(func() {
			key := fmt.Sprint("k", w)
			rev, err := kv.Put(b.Context(), key, value)
			for err == nil && next.Add(1) <= int64(n) {
				rev, err = kv.Update(b.Context(), key, value, rev)
			}
			if err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	return time.Since(start), bustest.CPUTime() - cpu0
}

// serverMessages is what the (first) server took in and sent out.
func serverMessages(env *bustest.Env) int64 {
	v, err := env.Servers[0].Varz(nil)
	if err != nil {
		return 0
	}
	return v.InMsgs + v.OutMsgs
}

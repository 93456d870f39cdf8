package bus_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// BenchmarkLogRead weighs reading one call by id in the store an event
// log would be (BenchmarkAtomicTransition's "log": a stream of the calls'
// events on <event>.<key>, a call read as the last message of *.<key>)
// against reading its key in tool_calls, with many calls stored: the
// log's read goes through the stream's index of subjects with a wildcard
// in the event's token, so it must not grow with the calls. Each call has
// four events in the log (a lifecycle's) and its entry in the bucket.
// "ns/kv" and "ns/log" are a read's wall time from one goroutine,
// "log/kv" their ratio.
func BenchmarkLogRead(b *testing.B) {
	for _, calls := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("calls=%dk", calls/1000), func(b *testing.B) { benchLogRead(b, calls) })
	}
}

func benchLogRead(b *testing.B, calls int) {
	b.StopTimer()
	e := startBenchEnv(b, bustest.Topologies[0])
	ctx := context.Background()
	value := e.entryJSON(b)

	status, err := e.env.KV.Status(ctx)
	require.NoError(b, err)
	cfg := status.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	cfg.Name, cfg.Subjects, cfg.MaxMsgsPerSubject = "EVENTLOG", []string{"evlog.>"}, 0
	logStream, err := e.env.JS.CreateStream(ctx, cfg)
	require.NoError(b, err)

	keys := make([]string, calls)
	for i := range keys {
		keys[i] = fmt.Sprintf("conv-%03d.call-%06d", i%benchConversations, i)
	}
	bustest.PutRaw(b, e.env.JS, calls, func(i int) (string, []byte) { return keys[i], value })
	events := []string{"approval_required", "approval_granted", "execution_started", "execution_succeeded"}
	bustest.PublishRaw(b, e.env.JS, len(events)*calls, func(i int) (string, []byte) {
		return "evlog." + events[i%len(events)] + "." + keys[i/len(events)], value
	})

	read := func(get func(key string) error) float64 {
		b.StartTimer()
		for i := 0; i < b.N; i++ {
			if err := get(keys[rand.IntN(len(keys))]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	}
	kv := read(func(key string) error { _, err := e.env.KV.Get(ctx, key); return err })
	b.ResetTimer()
	log := read(func(key string) error {
		m, err := logStream.GetLastMsgForSubject(ctx, "evlog.*."+key)
		if err == nil && m.Subject != "evlog.execution_succeeded."+key {
			err = fmt.Errorf("read %s, not the call's last event", m.Subject)
		}
		return err
	})
	b.ReportMetric(kv, "ns/kv")
	b.ReportMetric(log, "ns/log")
	b.ReportMetric(log/kv, "log/kv")
}

package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkAtomicTransition weighs, on one server in one run, two ways of
// committing a decision together with what it publishes (its event, the
// announcement to the awaiting agent):
//
//   - relay: today's path. The compare-and-set on tool_calls is the
//     commit; the relay (a durable consumer of the bucket's stream)
//     decodes the revision and publishes the event to TOOL_EVENTS, waits
//     for its ack and acks the revision.
//   - atomic: one atomic batch (NATS 2.12's atomic publish) into a stream
//     holding the entries and the events alike: the entry's put, on the
//     key's last revision, and the event, both stored or neither, one
//     ack; the writer announces the call itself.
//   - log: the event is the entry's revision. One publish, to a stream of
//     the calls' events, on <event>.<key>, expecting the last sequence
//     of <*>.<key> (Nats-Expected-Last-Subject-Sequence-Subject, NATS
//     2.11): the compare-and-set and the event in one message, one ack;
//     the writer announces the call itself. A call is read as the last
//     message of *.<key>.
//
// Both run b.N decisions from 16 goroutines, the relay's until it has
// relayed them all. "cas/s" is the raw compare-and-set, the baseline;
// "ratio-relay", "ratio-atomic" and "ratio-log" the paths' rates over it;
// "cpu-µs-cas", "cpu-µs-relay", "cpu-µs-atomic" and "cpu-µs-log" the
// process's CPU (the benchmark, its clients and the embedded server) per
// write.
func BenchmarkAtomicTransition(b *testing.B) {
	for _, topo := range bustest.Topologies {
		b.Run(topo.Name, func(b *testing.B) { benchAtomicTransition(b, topo) })
	}
}

func benchAtomicTransition(b *testing.B, topo bustest.Topology) {
	b.StopTimer()
	e := startBenchEnv(b, topo)
	c := newCASBench(b, e)
	ctx := context.Background()
	value := c.value
	var entry machine.Entry
	require.NoError(b, json.Unmarshal(value, &entry))

	// relay: keys of their own in tool_calls, the relay running.
	relayKeys := newKeys(b, e.env.KV, "relay", value)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = relay.NewRelay(e.env.JS, relay.RelayConfig{}, bustest.Logger()).Run(runCtx) }()
	// relayCaughtUp waits until the relay (its consumer created by Run,
	// soon after the start) has relayed every revision.
	relayCaughtUp := func() {
		var seen string
		bustest.Eventually(b, time.Minute, time.Millisecond, "the relay caught up", func() (bool, any) {
			cons, err := e.env.JS.Consumer(ctx, "KV_"+wire.CallsBucket, relay.RelayDurable)
			if err != nil {
				seen = err.Error()
				return false, seen
			}
			info, err := cons.Info(ctx)
			if err != nil {
				seen = err.Error()
				return false, seen
			}
			seen = fmt.Sprintf("%d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
			return info.NumPending == 0 && info.NumAckPending == 0, seen
		})
	}
	relayCaughtUp()

	// atomic: a stream like the bucket's, with the events' subjects too.
	status, err := e.env.KV.Status(ctx)
	require.NoError(b, err)
	cfg := status.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	cfg.Name, cfg.Subjects = "ATOMIC", []string{"$KV.atomic.>", "atomic.ev.>"}
	cfg.AllowAtomicPublish = true
	_, err = e.env.JS.CreateStream(ctx, cfg)
	require.NoError(b, err)
	atomicKeys := make([]string, len(c.keys))
	atomicRevs := make([]uint64, len(c.keys))
	for i := range atomicKeys {
		atomicKeys[i] = fmt.Sprintf("atomic-%05d", i)
		ack, err := e.env.JS.Publish(ctx, "$KV.atomic."+atomicKeys[i], value)
		require.NoError(b, err)
		atomicRevs[i] = ack.Sequence
	}

	// log: a stream of events whose last on a call's subjects is its entry.
	cfg.Name, cfg.Subjects, cfg.AllowAtomicPublish = "EVENTLOG", []string{"evlog.>"}, false
	cfg.MaxMsgsPerSubject = 0
	_, err = e.env.JS.CreateStream(ctx, cfg)
	require.NoError(b, err)
	logRevs := make([]uint64, len(c.keys))
	for i := range logRevs {
		ack, err := e.env.JS.Publish(ctx, "evlog.approval_required."+atomicKeys[i], value)
		require.NoError(b, err)
		logRevs[i] = ack.Sequence
	}

	workers := bustest.BenchParallelism * runtime.GOMAXPROCS(0)
	parallel := func(f func(i int) error) {
		b.SetParallelism(bustest.BenchParallelism)
		var nextWorker atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for i := int(nextWorker.Add(1) - 1); pb.Next(); i = (i + workers) % len(c.keys) {
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	measure := func(f func()) (time.Duration, time.Duration) {
		cpu0, t0 := bustest.CPUTime(), time.Now()
		f()
		return time.Since(t0), bustest.CPUTime() - cpu0
	}

	relayRun := func() {
		parallel(func(i int) error {
			rev, err := e.env.KV.Update(ctx, relayKeys.keys[i], value, relayKeys.revs[i])
			relayKeys.revs[i] = rev
			return err
		})
		relayCaughtUp()
	}
	nc := e.env.NC
	atomicRun := func() {
		parallel(func(i int) error {
			rev, err := atomicDecision(nc, atomicKeys[i], atomicRevs[i], value, &entry)
			atomicRevs[i] = rev
			return err
		})
	}

	js := e.env.JS
	logRun := func() {
		parallel(func(i int) error {
			rev, err := logDecision(ctx, js, atomicKeys[i], logRevs[i], &entry)
			logRevs[i] = rev
			return err
		})
	}

	b.StartTimer()
	cd1, cc1 := measure(func() { c.run(b) })
	rd1, rc1 := measure(relayRun)
	ad1, ac1 := measure(atomicRun)
	ld1, lc1 := measure(logRun)
	ld2, lc2 := measure(logRun)
	ad2, ac2 := measure(atomicRun)
	rd2, rc2 := measure(relayRun)
	cd2, cc2 := measure(func() { c.run(b) })
	b.StopTimer()
	events, err := e.env.JS.Stream(ctx, wire.EventsStream)
	require.NoError(b, err)
	require.GreaterOrEqual(b, events.CachedInfo().State.Msgs, uint64(2*b.N), "the relay published an event a decision")

	n := float64(2 * b.N)
	cas := benchRate(2*b.N, cd1+cd2)
	b.ReportMetric(cas, "cas/s")
	b.ReportMetric(benchRate(2*b.N, rd1+rd2)/cas, "ratio-relay")
	b.ReportMetric(benchRate(2*b.N, ad1+ad2)/cas, "ratio-atomic")
	b.ReportMetric(benchRate(2*b.N, ld1+ld2)/cas, "ratio-log")
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	b.ReportMetric(us(cc1+cc2), "cpu-µs-cas")
	b.ReportMetric(us(rc1+rc2), "cpu-µs-relay")
	b.ReportMetric(us(ac1+ac2), "cpu-µs-atomic")
	b.ReportMetric(us(lc1+lc2), "cpu-µs-log")
}

// logDecision publishes e's approval as the next message of key in the
// event log, if key's last is still at rev, announces it, and returns its
// sequence.
func logDecision(ctx context.Context, js jetstream.JetStream, key string, rev uint64, e *machine.Entry) (uint64, error) {
	t := e.LastTransition
	event, _ := json.Marshal(wire.Event{
		V: wire.EventVersion, ID: key, Type: "tool.approval_granted", Event: t.Event, From: t.From, To: t.To,
		Actor: t.Actor, Reason: t.Reason, At: t.At, Revision: rev, Entry: e,
	})
	ack, err := js.Publish(ctx, "evlog.approval_granted."+key, event, jetstream.WithExpectLastSequenceForSubject(rev, "evlog.*."+key))
	if err != nil {
		return 0, fmt.Errorf("log %s at %d: %w", key, rev, err)
	}
	if err := js.Conn().Publish("announce.evlog."+key, event); err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// atomicDecision writes value to key at rev with its event, in one atomic
// batch, announces it, and returns the entry's new revision.
func atomicDecision(nc *nats.Conn, key string, rev uint64, value []byte, e *machine.Entry) (uint64, error) {
	id := nuid.Next()
	t := e.LastTransition
	event, _ := json.Marshal(wire.Event{
		V: wire.EventVersion, ID: key, Type: "tool.approval_granted", Event: t.Event, From: t.From, To: t.To,
		Actor: t.Actor, Reason: t.Reason, At: t.At, Entry: e,
	})
	msg := func(subject string, seq int, data []byte) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(seq))
		return m
	}
	put := msg("$KV.atomic."+key, 1, value)
	put.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if err := nc.PublishMsg(put); err != nil {
		return 0, err
	}
	commit := msg("atomic.ev.approval_granted."+key, 2, event)
	commit.Header.Set("Nats-Batch-Commit", "1")
	resp, err := nc.RequestMsg(commit, 10*time.Second)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Seq   uint64 `json:"seq"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, err
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("batch on %s at %d: %s", key, rev, ack.Error.Description)
	}
	if err := nc.Publish("atomic.announce."+key, event); err != nil {
		return 0, err
	}
	return ack.Seq - 1, nil // the put, the batch's first of two: the ack names the last
}

// benchKeys are keys created with one value, each at its last revision.
type benchKeys struct {
	keys []string
	revs []uint64
}

func newKeys(b *testing.B, kv jetstream.KeyValue, prefix string, value []byte) *benchKeys {
	n := (benchCASKeys + bustest.BenchParallelism*runtime.GOMAXPROCS(0) - 1) / (bustest.BenchParallelism * runtime.GOMAXPROCS(0)) * (bustest.BenchParallelism * runtime.GOMAXPROCS(0))
	k := &benchKeys{keys: make([]string, n), revs: make([]uint64, n)}
	for i := range k.keys {
		k.keys[i] = fmt.Sprintf("%s-%05d", prefix, i)
		rev, err := kv.Create(context.Background(), k.keys[i], value)
		require.NoError(b, err)
		k.revs[i] = rev
	}
	return k
}

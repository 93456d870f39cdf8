package client_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkLifecycleFloor measures what an approval lifecycle costs at the
// least, whatever toolgate does inside its requests: the same parties
// with the same credentials send the same requests across the same
// accounts (the agent's submit, the approver's decide, the executor's
// request for work and its report), and the one writer answers each with
// nothing but its writes, a 600-byte value and its events (no policy, no
// receipts, no JSON, no relay, no readers of the events). It is the
// ceiling of any design that keeps the request API and its accounts, and
// so what a goal for `toolgate bench`'s ratio can ask for.
//
//   - kv: today's store. A call's three writes are compare-and-sets on a
//     KV bucket, each followed by its events' publishes to a stream (four
//     events in all, the approval's two in one go), as a writer that
//     published them itself would; nothing reads the events.
//   - log: the event is the entry's revision. Each write is one publish
//     to a stream, on <event>.<key>, expecting the last sequence of
//     *.<key> (Nats-Expected-Last-Subject-Sequence-Subject): the
//     compare-and-set and the event in one message (a write of two
//     transitions: one message with the last one's subject).
//
// Both answer the agent on its call's own subject once the call has run,
// as toolgate's announcement does; the approver's write hands the call to
// an executor's request that waits, as an approval's claim does.
// "cas/s" is the raw KV compare-and-set of the same server by as many
// writers as agents, before and after; "ratio-kv" and "ratio-log" the
// lifecycles' rates over it, the figure to hold against the ratio
// `toolgate bench --embedded` reports (the parties, the server and the
// writer share one process, as there); "msgs-kv" and "msgs-log" the
// server's messages in and out per lifecycle; "cpu-µs-kv" and
// "cpu-µs-log" the process's CPU per lifecycle.
//
// Run it with: go test -run '^$' -bench LifecycleFloor -benchtime 4000x ./client
func BenchmarkLifecycleFloor(b *testing.B) {
	// No role but the relay, which reads a bucket the floor never writes:
	// the request API's subjects are the floor's to answer.
	g := toolgatetest.Start(b, toolgatetest.Options{Roles: []string{"relay"}})
	ctx := b.Context()
	kv, err := g.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "floor_calls", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	cas, err := g.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "floor_cas", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []jetstream.StreamConfig{
		{Name: "FLOOR_EVENTS", Subjects: []string{"floor.ev.>"}, Storage: jetstream.FileStorage},
		{Name: "FLOOR_LOG", Subjects: []string{"floor.log.>"}, Storage: jetstream.FileStorage},
	} {
		if _, err := g.JS.CreateStream(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	agentNC, _ := g.ConnectAs(b, "agent")
	approverNC, _ := g.ConnectAs(b, "approver")
	executorNC, _ := g.ConnectAs(b, "executor")
	agentName, err := client.CredentialName(server.CredsPath(g.Data, "agent"))
	if err != nil {
		b.Fatal(err)
	}

	writers := map[string]*floorWriter{
		"kv":  {name: "kv", kv: kv, js: g.JS},
		"log": {name: "log", js: g.JS, log: true},
	}
	msgs := func() uint64 {
		in, out, ok := g.Main.ServerMessages()
		if !ok {
			b.Fatal("no embedded server to count the messages of")
		}
		return uint64(in + out)
	}
	b.ResetTimer()
	cd1 := runCAS(b, cas)
	for _, name := range []string{"kv", "log", "log", "kv"} {
		w := writers[name]
		stop, err := w.serve(g.NC, agentName)
		if err != nil {
			b.Fatal(err)
		}
		m0, c0 := msgs(), bustest.CPUTime()
		w.took += runFloor(b, w.round, agentNC, approverNC, executorNC, agentName)
		w.msgs += msgs() - m0
		w.cpu += bustest.CPUTime() - c0
		stop()
	}
	cd2 := runCAS(b, cas)
	b.StopTimer()
	casPerSec := float64(2*b.N) / (cd1 + cd2).Seconds()
	b.ReportMetric(casPerSec, "cas/s")
	for name, w := range writers {
		b.ReportMetric(float64(2*b.N)/w.took.Seconds()/casPerSec, "ratio-"+name)
		b.ReportMetric(float64(w.msgs)/float64(2*b.N), "msgs-"+name)
		b.ReportMetric(float64(w.cpu.Microseconds())/float64(2*b.N), "cpu-µs-"+name)
	}
}

// floorWriter answers the request API with nothing but a lifecycle's
// writes.
type floorWriter struct {
	name string
	kv   jetstream.KeyValue
	js   jetstream.JetStream
	log  bool

	round string // the run being served: its calls' prefix
	took  time.Duration
	cpu   time.Duration
	msgs  uint64
}

var floorValue = make([]byte, 600)

// write stores the call's next revision after rev with the events
// named, and returns the new revision.
func (w *floorWriter) write(ctx context.Context, key string, rev uint64, events ...string) (uint64, error) {
	if w.log {
		last := events[len(events)-1]
		ack, err := w.js.Publish(ctx, "floor.log."+last+"."+key, floorValue, jetstream.WithExpectLastSequenceForSubject(rev, "floor.log.*."+key))
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	var err error
	if rev == 0 {
		rev, err = w.kv.Create(ctx, key, floorValue)
	} else {
		rev, err = w.kv.Update(ctx, key, floorValue, rev)
	}
	if err != nil {
		return 0, err
	}
	acks := make([]jetstream.PubAckFuture, len(events))
	for i, ev := range events {
		if acks[i], err = w.js.PublishAsync("floor.ev."+ev, floorValue, jetstream.WithMsgID(key+":"+strconv.FormatUint(rev, 10)+ev)); err != nil {
			return 0, err
		}
	}
	for _, a := range acks {
		select {
		case <-a.Ok():
		case err := <-a.Err():
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return rev, nil
}

// serve answers submit, decide, work and succeeded on toolgate's own
// connection until stop. Each serve keeps its own calls: a request of an
// earlier run's may still be handled after it stopped.
func (w *floorWriter) serve(nc *nats.Conn, agent string) (stop func(), err error) {
	w.round = fmt.Sprintf("%s%d", w.name, floorRounds.Add(1))
	round := w.round
	var (
		mu    sync.Mutex
		revs  = map[string]uint64{}
		takes []*nats.Msg // executors' requests for work that wait
		calls []string    // approved calls no request has taken yet
	)
	ctx, cancel := context.WithCancel(context.Background())
	var subs []*nats.Subscription
	handle := func(endpoint string, f func(m *nats.Msg) error) {
		if err != nil {
			return
		}
		var s *nats.Subscription
		// A goroutine a request, as toolgate's request API answers many
		// at once: a subscription's handler is called one message at a
		// time.
		s, err = nc.QueueSubscribe(wire.APISubject(endpoint), "floor", func(m *nats.Msg) {
			go func() {
				if err := f(m); err != nil {
					_ = m.Respond([]byte("error: " + err.Error()))
				}
			}()
		})
		subs = append(subs, s)
	}
	handle("submit", func(m *nats.Msg) error {
		key := string(m.Data)
		rev, err := w.write(ctx, key, 0, "approval_required")
		if err != nil {
			return err
		}
		mu.Lock()
		revs[key] = rev
		mu.Unlock()
		return m.Respond(floorValue)
	})
	handle("decide", func(m *nats.Msg) error {
		key := string(m.Data)
		mu.Lock()
		rev := revs[key]
		mu.Unlock()
		rev, err := w.write(ctx, key, rev, "approval_granted", "execution_started")
		if err != nil {
			return err
		}
		mu.Lock()
		revs[key] = rev
		var take *nats.Msg
		if len(takes) > 0 {
			take, takes = takes[0], takes[1:]
		} else {
			calls = append(calls, key)
		}
		mu.Unlock()
		if take != nil {
			_ = take.Respond([]byte(key))
		}
		return m.Respond(floorValue)
	})
	handle("work", func(m *nats.Msg) error {
		if string(m.Data) != round {
			return nil // an earlier run's request, sent as it ended
		}
		mu.Lock()
		defer mu.Unlock()
		if len(calls) > 0 {
			key := calls[0]
			calls = calls[1:]
			return m.Respond([]byte(key))
		}
		takes = append(takes, m)
		return nil
	})
	handle("succeeded", func(m *nats.Msg) error {
		key := string(m.Data)
		mu.Lock()
		rev := revs[key]
		mu.Unlock()
		if _, err := w.write(ctx, key, rev, "execution_succeeded"); err != nil {
			return err
		}
		if err := m.Respond(floorValue); err != nil {
			return err
		}
		return nc.Publish(wire.EntrySubject(agent, key), floorValue)
	})
	if err == nil {
		err = nc.Flush()
	}
	return func() {
		cancel()
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}, err
}

// floorRounds numbers the floor's runs, whose calls need keys of their
// own.
var floorRounds atomic.Int64

// runFloor runs b.N floor lifecycles of a round, lifecycleAgents at a
// time, with an executor keeping lifecycleAgents requests for work
// waiting.
func runFloor(b *testing.B, round string, agent, approver, executor *nats.Conn, agentName string) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	var execs sync.WaitGroup
	defer execs.Wait() // after cancel: deferred calls run last first
	defer cancel()
	for range lifecycleAgents {
		execs.Go(func() {
			for ctx.Err() == nil {
				m, err := executor.RequestWithContext(ctx, wire.APISubject("work"), []byte(round))
				if err != nil {
					continue
				}
				if _, err := executor.Request(wire.APISubject("succeeded"), m.Data, 10*time.Second); err != nil {
					b.Error(err)
				}
			}
		})
	}
	return eachAgent(b, func(i int64) error {
		key := fmt.Sprintf("%s-%d", round, i)
		step := "subscribe"
		done, err := agent.SubscribeSync(wire.EntrySubject(agentName, key))
		if err == nil {
			step = "submit"
			_, err = agent.Request(wire.APISubject("submit"), []byte(key), 10*time.Second)
		}
		if err == nil {
			step = "decide"
			_, err = approver.Request(wire.APISubject("decide"), []byte(key), 10*time.Second)
		}
		if err == nil {
			step = "the call's end"
			_, err = done.NextMsg(10 * time.Second)
		}
		if err == nil {
			err = done.Unsubscribe()
		}
		if err != nil {
			return fmt.Errorf("%s, %s: %w", key, step, err)
		}
		return nil
	})
}

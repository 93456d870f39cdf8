package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// These benchmarks measure toolgate's write path against the raw JetStream
// KV compare-and-set it is built on. Absolute rates on a shared or small
// machine swing by tens of percent from one run to the next, so the figure
// that means something is BenchmarkTransitionsVsCAS's "ratio": transitions/s
// over cas/s, both measured in the same run on the same servers.
//
// Each run starts its own servers (bustest.Start registers their shutdown on
// the run's b), so the bucket is empty at the start of every run and no run
// pays for the history another left behind. Setup (servers, keys, the
// entries to decide) is outside the timer. The relay is not running: these
// are the costs of the KV writes, which are the commit point.

// benchCASKeys is how many keys the CAS baseline spreads its writes over, so
// it measures the bucket rather than contention on one subject.
const benchCASKeys = 512

// benchConversations is how many conversations the submitted entries are
// spread over; a pendingId is <conversation>.<toolCallId>.
const benchConversations = 64

// benchDecision approves; the reviewer is not the caller, who may not decide.
var benchDecision = machine.Decision{Approve: true, By: "reviewer-7", Reason: "recipient checked"}

// benchAsk is the policy: every call waits for a human, with a timeout far
// beyond the benchmark so no entry can expire under it.
var benchAsk = machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
	return machine.Verdict{
		Action:          machine.ActionAsk,
		ApprovalTimeout: time.Hour,
		Reason:          "email leaves the company",
	}, nil
})

// benchArguments are a plausible tool call's arguments. With its ids,
// decision and last transition the approved entry comes to about 650 bytes
// of JSON: an ordinary entry, not a token value that flatters the baseline.
var benchArguments = json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed"}`)

// benchCall is the i-th call of a submit round; round keeps the rounds of
// one run from colliding on toolCallId.
func benchCall(round, i int) machine.Call {
	return machine.Call{
		ToolCallID:     fmt.Sprintf("call-r%d-%07d", round, i),
		ToolName:       "send_email",
		Arguments:      benchArguments,
		CallerBotID:    "agent-support-3",
		ConversationID: fmt.Sprintf("conv-%03d", i%benchConversations),
		Team:           "support",
		EstimatedCost:  0.002,
	}
}

// benchEnv is one run's servers and the machine over them.
type benchEnv struct {
	env *bustest.Env
	m   *machine.Machine
}

func startBenchEnv(b *testing.B, topo bustest.Topology) *benchEnv {
	b.Helper()
	env := bustest.Start(b, topo)
	return &benchEnv{env: env, m: machine.New(env.Store, machine.WithEvaluator(benchAsk))}
}

// entryJSON submits and approves one call and returns the entry as stored,
// so the CAS baseline writes exactly the bytes a transition writes.
func (e *benchEnv) entryJSON(b *testing.B) []byte {
	b.Helper()
	ctx := context.Background()
	sub, err := e.m.Submit(ctx, benchCall(-1, 0))
	require.NoError(b, err)
	_, err = e.m.Decide(ctx, sub.PendingID, benchDecision)
	require.NoError(b, err)
	kve, err := e.env.KV.Get(ctx, sub.PendingID)
	require.NoError(b, err)
	return kve.Value()
}

// casBench updates pre-created keys with kv.Update at the revision it last
// wrote, the compare-and-set a transition ends with and nothing else.
type casBench struct {
	kv    jetstream.KeyValue
	value []byte
	keys  []string
	revs  []uint64
}

// newCASBench creates the keys. Each RunParallel goroutine owns the keys
// whose index is its own modulo the goroutine count, so it always knows the
// current revision and no write conflicts: the baseline is the
// uncontended rate, as the transitions below are uncontended too.
func newCASBench(b *testing.B, e *benchEnv) *casBench {
	b.Helper()
	workers := bustest.BenchParallelism * runtime.GOMAXPROCS(0)
	n := (benchCASKeys + workers - 1) / workers * workers // a multiple of workers
	c := &casBench{kv: e.env.KV, value: e.entryJSON(b), keys: make([]string, n), revs: make([]uint64, n)}
	ctx := context.Background()
	for i := range c.keys {
		c.keys[i] = fmt.Sprintf("cas-%03d.key-%05d", i%benchConversations, i)
		rev, err := c.kv.Create(ctx, c.keys[i], c.value)
		require.NoError(b, err)
		c.revs[i] = rev
	}
	return c
}

// run does b.N updates and returns how long they took.
func (c *casBench) run(b *testing.B) time.Duration {
	b.SetParallelism(bustest.BenchParallelism)
	workers := bustest.BenchParallelism * runtime.GOMAXPROCS(0)
	var nextWorker atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		// Stepping by the goroutine count stays on this goroutine's keys,
		// since len(c.keys) is a multiple of it.
		for i := int(nextWorker.Add(1) - 1); pb.Next(); i = (i + workers) % len(c.keys) {
			rev, err := c.kv.Update(ctx, c.keys[i], c.value, c.revs[i])
			if err != nil {
				b.Errorf("update %s at revision %d: %v", c.keys[i], c.revs[i], err)
				return
			}
			c.revs[i] = rev
		}
	})
	return time.Since(start)
}

// submit submits b.N calls through the machine (each a Get that misses and
// a Create) and returns their pendingIds and how long it took.
func (e *benchEnv) submit(b *testing.B, round int) ([]string, time.Duration) {
	b.SetParallelism(bustest.BenchParallelism)
	ids := make([]string, b.N)
	var next atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			i := int(next.Add(1) - 1)
			ent, err := e.m.Submit(ctx, benchCall(round, i))
			if err != nil {
				b.Errorf("submit: %v", err)
				return
			}
			if ent.Status != machine.StatePendingApproval {
				b.Errorf("submit %s: status %s, want %s", ent.PendingID, ent.Status, machine.StatePendingApproval)
				return
			}
			ids[i] = ent.PendingID
		}
	})
	return ids, time.Since(start)
}

// decide approves every id once, b.N of them, and returns how long it took.
// Each Decide is a Get, the transition table's check and a CAS Update.
func (e *benchEnv) decide(b *testing.B, ids []string) time.Duration {
	b.SetParallelism(bustest.BenchParallelism)
	var next atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			id := ids[next.Add(1)-1]
			ent, err := e.m.Decide(ctx, id, benchDecision)
			if err != nil {
				b.Errorf("decide: %v", err)
				return
			}
			if ent.Status != machine.StateApproved {
				b.Errorf("decide %s: status %s, want %s", id, ent.Status, machine.StateApproved)
				return
			}
		}
	})
	return time.Since(start)
}

// benchRate is ops per second.
func benchRate(ops int, d time.Duration) float64 { return float64(ops) / d.Seconds() }

// BenchmarkKVCompareAndSet is the baseline: kv.Update at a known revision
// of an entry-sized value, spread over many keys, on the tool_calls bucket.
func BenchmarkKVCompareAndSet(b *testing.B) {
	for _, topo := range bustest.Topologies {
		b.Run(topo.Name, func(b *testing.B) {
			e := startBenchEnv(b, topo)
			c := newCASBench(b, e)
			b.ResetTimer()
			d := c.run(b)
			b.ReportMetric(benchRate(b.N, d), "cas/s")
		})
	}
}

// BenchmarkTransitions decides b.N pending entries, one approval each. The
// entries are submitted before the timer starts; how fast that went is
// reported as submits/s.
func BenchmarkTransitions(b *testing.B) {
	for _, topo := range bustest.Topologies {
		b.Run(topo.Name, func(b *testing.B) {
			e := startBenchEnv(b, topo)
			ids, sd := e.submit(b, 0)
			b.ResetTimer()
			d := e.decide(b, ids)
			b.StopTimer()
			b.ReportMetric(benchRate(b.N, d), "transitions/s")
			b.ReportMetric(benchRate(b.N, sd), "submits/s")
		})
	}
}

// BenchmarkTransitionsVsCAS measures the CAS baseline and transitions in the
// same run, on the same servers, and reports transitions/s over cas/s as
// "ratio", the one figure comparable across runs and machines.
//
// Each side runs twice, b.N operations each time, in the order CAS,
// transitions, transitions, CAS: a server that speeds up or slows down over
// the run (the file store growing, the page cache warming, a noisy
// neighbour coming or going) then weighs on both sides alike instead of on
// whichever went second. ns/op is per transition.
//
// Expect well under 0.5. A transition is a Get and then the CAS Update, two
// round trips where the baseline makes one, and a direct Get costs the
// server about what an Update does on one node. On top of that the client
// decodes the entry, builds the transition table's FSM and encodes the
// entry again; with the embedded server on the same few cores, that CPU is
// taken from the server. On a cluster the Update pays for replication and
// the Get does not, so the Get weighs less and the ratio is higher.
func BenchmarkTransitionsVsCAS(b *testing.B) {
	for _, topo := range bustest.Topologies {
		b.Run(topo.Name, func(b *testing.B) {
			b.StopTimer()
			e := startBenchEnv(b, topo)
			c := newCASBench(b, e)
			ids1, sd1 := e.submit(b, 1)
			ids2, sd2 := e.submit(b, 2)

			// The timer runs over the measured phases only, so that
			// -benchtime=1s sizes b.N by them and not by the setup.
			b.StartTimer()
			cd1 := c.run(b)
			td1 := e.decide(b, ids1)
			td2 := e.decide(b, ids2)
			cd2 := c.run(b)
			b.StopTimer()

			casPerSec := benchRate(2*b.N, cd1+cd2)
			transitionsPerSec := benchRate(2*b.N, td1+td2)
			b.ReportMetric(casPerSec, "cas/s")
			b.ReportMetric(transitionsPerSec, "transitions/s")
			b.ReportMetric(benchRate(2*b.N, sd1+sd2), "submits/s")
			b.ReportMetric(transitionsPerSec/casPerSec, "ratio")
			b.ReportMetric(float64((td1+td2).Nanoseconds())/float64(2*b.N), "ns/op")
		})
	}
}

// BenchmarkClaimVsCAS measures, in one run on the same server, the raw CAS
// baseline and the claims of approved calls two ways: Claim (a read, then
// the CAS) and ClaimAt with the revision the approval wrote, which the
// store that wrote it remembers (the CAS alone). "ratio-claim" and
// "ratio-claimat" are each over cas/s; the second is the executor's path
// when the process that recorded the approval serves its claim.
func BenchmarkClaimVsCAS(b *testing.B) {
	b.StopTimer()
	e := startBenchEnv(b, bustest.Topologies[0])
	c := newCASBench(b, e)
	approved := func(round int) ([]string, []uint64) {
		ids, _ := e.submit(b, round)
		revs := make([]uint64, len(ids))
		for i, id := range ids {
			ent, err := e.m.Decide(context.Background(), id, benchDecision)
			require.NoError(b, err)
			_, revs[i], err = e.env.Store.Get(context.Background(), ent.PendingID)
			require.NoError(b, err)
		}
		return ids, revs
	}
	ids1, _ := approved(1)
	ids2, revs2 := approved(2)
	claim := func(ids []string, revs []uint64) time.Duration {
		b.SetParallelism(bustest.BenchParallelism)
		var next atomic.Int64
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1) - 1
				var rev uint64
				if revs != nil {
					rev = revs[i]
				}
				if _, err := e.m.ClaimAt(context.Background(), ids[i], rev, "exec-1", time.Minute); err != nil {
					b.Errorf("claim: %v", err)
					return
				}
			}
		})
		return time.Since(start)
	}
	b.StartTimer()
	cd1 := c.run(b)
	plain := claim(ids1, nil)
	at := claim(ids2, revs2)
	cd2 := c.run(b)
	b.StopTimer()
	cas := benchRate(2*b.N, cd1+cd2)
	b.ReportMetric(cas, "cas/s")
	b.ReportMetric(benchRate(b.N, plain)/cas, "ratio-claim")
	b.ReportMetric(benchRate(b.N, at)/cas, "ratio-claimat")
}

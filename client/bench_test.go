package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// lifecycleAgents is how many agents run lifecycles at once, and how many
// writers the CAS baseline has.
const lifecycleAgents = 32

// BenchmarkLifecycleVsCAS measures whole approval lifecycles against the
// raw KV compare-and-set rate of the same server, in the same run. A
// lifecycle is what an agent, an approver and an executor do for one call,
// each through toolgate's request API: the agent submits and awaits the
// outcome, the approver approves, an executor claims, runs a handler that
// does nothing, and records the result. The CAS baseline is kv.Update at a
// known revision by as many writers as there are agents, on a bucket of its
// own.
//
// "credentials": each party holds its role's credential, so every request
// crosses from the CLIENTS account into toolgate's with the requester's
// identity, as in production. "toolgate": all three use toolgate's own
// identity, as its in-process roles do; the gap between the two is what
// authentication costs.
//
// "ratio" is lifecycles/s over cas/s: the one figure comparable across
// runs and machines. Each side runs twice, in the order CAS, lifecycles,
// lifecycles, CAS, so that a server speeding up or slowing down weighs on
// both alike.
//
// Run it with: go test -run '^$' -bench LifecycleVsCAS -benchtime 2000x ./client
func BenchmarkLifecycleVsCAS(b *testing.B) {
	g := toolgatetest.Start(b, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default: {requiresApprovalTools: all}\n"})
	kv, err := g.JS.CreateKeyValue(b.Context(), jetstream.KeyValueConfig{Bucket: "bench_cas", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	as := func(role string) *client.Client {
		_, c := g.ConnectAs(b, role)
		return c
	}
	for _, bc := range []struct {
		name                      string
		agent, approver, executor func() *client.Client
	}{
		{"credentials", func() *client.Client { return as("agent") }, func() *client.Client { return as("approver") }, func() *client.Client { return as("executor") }},
		{"toolgate", func() *client.Client { return g.Client }, func() *client.Client { return g.Client }, func() *client.Client { return g.Client }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchLifecycles(b, kv, bc.agent(), bc.approver(), bc.executor())
		})
	}
}

// rounds numbers the runs of lifecycles, whose calls need ids of their own.
var rounds atomic.Int64

func benchLifecycles(b *testing.B, kv jetstream.KeyValue, agent, approver, executor *client.Client) {
	x, err := executor.NewExecutor(client.ExecutorOptions{Concurrency: lifecycleAgents})
	if err != nil {
		b.Fatal(err)
	}
	x.Handle("noop", func(context.Context, client.Call) (client.Result, error) {
		return client.Result{Output: json.RawMessage(`true`)}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = x.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	lifecycles := func() time.Duration {
		return runLifecycles(b, agent, approver, fmt.Sprintf("%s-%d", path.Base(b.Name()), rounds.Add(1)))
	}

	b.ResetTimer()
	cd1 := runCAS(b, kv)
	ld1 := lifecycles()
	ld2 := lifecycles()
	cd2 := runCAS(b, kv)
	b.StopTimer()

	casPerSec := float64(2*b.N) / (cd1 + cd2).Seconds()
	perSec := float64(2*b.N) / (ld1 + ld2).Seconds()
	b.ReportMetric(casPerSec, "cas/s")
	b.ReportMetric(perSec, "lifecycles/s")
	b.ReportMetric(perSec/casPerSec, "ratio")
	b.ReportMetric(float64((ld1+ld2).Nanoseconds())/float64(2*b.N), "ns/op")
}

// runCAS makes b.N compare-and-set updates, each writer on a key of its own.
func runCAS(b *testing.B, kv jetstream.KeyValue) time.Duration {
	ctx := context.Background()
	value := make([]byte, 600) // about an entry's size
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range lifecycleAgents {
		wg.Go(func() {
			key := fmt.Sprint("k", w)
			rev, err := kv.Put(ctx, key, value)
			if err != nil {
				b.Error(err)
				return
			}
			for next.Add(1) <= int64(b.N) {
				if rev, err = kv.Update(ctx, key, value, rev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// runLifecycles runs b.N lifecycles, lifecycleAgents at a time.
func runLifecycles(b *testing.B, agent, approver *client.Client, round string) time.Duration {
	ctx := context.Background()
	return eachAgent(b, func(i int64) error {
		call := machine.Call{ToolCallID: fmt.Sprintf("%s-%d", round, i), ToolName: "noop", Arguments: json.RawMessage(`{}`), CallerBotID: "agent", ConversationID: "bench"}
		e, err := agent.Submit(ctx, call)
		if err == nil {
			_, err = approver.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true})
		}
		if err == nil {
			_, err = agent.Await(ctx, e.PendingID, client.UntilFinished())
		}
		return err
	})
}

// eachAgent runs lifecycle(i) for i from 1 to b.N, lifecycleAgents at a
// time, and returns how long they all took. An agent stops at its first
// error, which fails b.
func eachAgent(b *testing.B, lifecycle func(i int64) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range lifecycleAgents {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := lifecycle(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

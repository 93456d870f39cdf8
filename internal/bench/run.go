package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The tools the bench's calls name: the policy must ask a human about the
// first and run the second at once (an embedded toolgate's does).
const (
	ApprovalTool = "bench_approval"
	AutoTool     = "bench_auto"
	Policy       = "default:\n  requiresApprovalTools: [" + ApprovalTool + "]\n  approvalTimeoutMs: 600000\n"
)

// LifecycleRoles are the roles a lifecycle needs a toolgate to run (the
// bench hosts the executor): an embedded toolgate's by default.
func LifecycleRoles() server.Roles { return server.Roles{"relay", "intake", "timer"} }

// Config is what one run of the bench measures.
type Config struct {
	Agents int      // agents submitting at once, and CAS writers
	Calls  int      // lifecycles a path
	Paths  []string // "approval", "auto" or both, in the order measured

	// Embedded makes the bench measure a toolgate of its own, in a
	// temporary directory, running Roles (an http role on a free port),
	// its server syncing its writes as Sync says (server.SyncInterval or
	// server.SyncAlways); Version is the version it says it is.
	Embedded bool
	Roles    server.Roles
	Sync     string
	Version  string

	// Otherwise the bench measures the toolgate at Conn, whose data
	// directory Data holds the role credentials (the bench runs where
	// serve does) and whose policy must ask about ApprovalTool and run
	// AutoTool; ServePID, when not 0, is its process, whose CPU time the
	// report gives per lifecycle.
	Conn     bus.ConnConfig
	Data     string
	ServePID int
}

// Run measures toolgate as cfg says: the raw KV compare-and-set rate of
// its server, then each path, then the CAS rate again, so that a server
// speeding up or slowing down weighs on both sides alike.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	conn, data := cfg.Conn, cfg.Data
	cpu := func() time.Duration { return 0 }
	msgs := func() int64 { return 0 }
	target := conn.URLs
	if cfg.Embedded {
		m, stop, err := startToolgate(ctx, cfg.Roles, cfg.Sync, cfg.Version)
		if err != nil {
			return nil, err
		}
		defer stop()
		conn = bus.ConnConfig{URLs: m.NATSURL()}
		data, target = m.Config.Data, "embedded"
		cpu = selfCPU
		msgs = func() int64 {
			in, out, _ := m.ServerMessages()
			return in + out
		}
	} else {
		if cfg.ServePID > 0 {
			cpu = func() time.Duration { return processCPU(cfg.ServePID) }
		}
		// The servers' own count, read with a system credential made from
		// data's keys, where there are keys to make one.
		if count, closeCount, err := serverMessages(conn, data); err == nil {
			defer closeCount()
			msgs = count
		}
	}
	b, err := connectParties(conn, data)
	if err != nil {
		return nil, err
	}
	defer b.close()
	report, err := b.run(ctx, cfg.Agents, cfg.Calls, cfg.Paths, cpu, msgs)
	if err != nil {
		return nil, err
	}
	report.Target = target
	if cfg.Embedded {
		report.Sync = cfg.Sync
	}
	return report, nil
}

// startToolgate runs a toolgate of the bench's own: an embedded
// server in a temporary directory, the bench's policy, the roles given
// (by default those a lifecycle needs: the bench hosts the executor). An
// http role serves on a free port.
func startToolgate(ctx context.Context, roles server.Roles, sync, version string) (*server.Main, func(), error) {
	dir, err := os.MkdirTemp("", "toolgate-bench-")
	if err != nil {
		return nil, nil, err
	}
	cfg := server.DefaultConfig()
	cfg.Data, cfg.Listen, cfg.HTTP = filepath.Join(dir, "data"), "127.0.0.1:-1", ""
	cfg.Roles, cfg.Sync = roles, sync
	if slices.Contains(roles.Resolve(), "http") {
		cfg.HTTP = "127.0.0.1:0"
	}
	cfg.PolicyFile = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(cfg.PolicyFile, []byte(Policy), 0o600); err != nil {
		return nil, nil, err
	}
	m := &server.Main{Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: version}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := func() { cancel(); <-done; os.RemoveAll(dir) }
	select {
	case <-m.Ready():
		return m, stop, nil
	case err := <-done:
		os.RemoveAll(dir)
		cancel()
		return nil, nil, fmt.Errorf("embedded toolgate: %w", err)
	}
}

// parties hold a connection per party, each with its role's credential.
type parties struct {
	conns                     []*nats.Conn
	agent, approver, executor *client.Client
	js                        jetstream.JetStream // toolgate's own, for the CAS baseline
}

func connectParties(cfg bus.ConnConfig, data string) (*parties, error) {
	b := &parties{}
	connect := func(role string) (*nats.Conn, error) {
		cc := cfg
		cc.Name = "toolgate bench " + role
		creds := server.CredsPath(data, role)
		var opts []nats.Option
		if _, err := os.Stat(creds); err == nil {
			if opts, err = client.Credentials(creds); err != nil {
				return nil, err
			}
		} else if cfg.CredsFile == "" && cfg.User == "" && cfg.Token == "" {
			return nil, fmt.Errorf("bench: no %s credential at %s: run the bench where toolgate serves, or give its --data", role, creds)
		}
		nc, err := bus.Connect(cc, opts...)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", role, err)
		}
		b.conns = append(b.conns, nc)
		return nc, nil
	}
	for _, p := range []struct {
		role string
		dst  **client.Client
	}{{"agent", &b.agent}, {"approver", &b.approver}, {"executor", &b.executor}} {
		nc, err := connect(p.role)
		if err != nil {
			b.close()
			return nil, err
		}
		if *p.dst, err = client.New(nc); err != nil {
			b.close()
			return nil, err
		}
	}
	nc, err := connect("toolgate")
	if err != nil {
		b.close()
		return nil, err
	}
	if b.js, err = jetstream.New(nc); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *parties) close() {
	for _, nc := range b.conns {
		nc.Close()
	}
}

// run measures CAS, then each path, then CAS again, so that a server
// speeding up or slowing down weighs on both sides alike.
func (b *parties) run(ctx context.Context, agents, calls int, paths []string, cpu func() time.Duration, msgs func() int64) (*Report, error) {
	r := &Report{Agents: agents, Calls: calls, Host: host()}
	// The baseline's bucket is replicated as toolgate's calls are: on a
	// cluster, a compare-and-set on one replica would be no measure of
	// one on three.
	toolgates, err := b.js.Stream(ctx, "KV_"+wire.CallsBucket)
	if err != nil {
		return nil, fmt.Errorf("bench: toolgate's calls: %w", err)
	}
	bucket := "bench_cas_" + randomHex(4)
	kv, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage, Replicas: toolgates.CachedInfo().Config.Replicas})
	if err != nil {
		return nil, fmt.Errorf("bench: the CAS baseline's bucket: %w", err)
	}
	defer b.js.DeleteKeyValue(context.WithoutCancel(ctx), bucket) //nolint:errcheck // a leftover bucket is harmless
	baseline, err := b.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("bench: the CAS baseline's bucket: %w", err)
	}
	r.CASReplicas = baseline.CachedInfo().Config.Replicas

	x, err := b.executor.NewExecutor(client.ExecutorOptions{Concurrency: agents, ID: "bench-" + randomHex(3)})
	if err != nil {
		return nil, err
	}
	var started sync.Map // pending ID: decision, with the handler's start
	handler := func(_ context.Context, call client.Call) (client.Result, error) {
		started.Store(call.PendingID, decision{handler: time.Now()})
		return client.Result{Output: json.RawMessage(`true`)}, nil
	}
	x.Handle(ApprovalTool, handler)
	x.Handle(AutoTool, handler)
	xctx, stopExecutor := context.WithCancel(ctx)
	var xdone sync.WaitGroup
	xdone.Go(func() { _ = x.Run(xctx) })
	defer func() { stopExecutor(); xdone.Wait() }()

	cas1, err := runCAS(ctx, kv, agents, calls)
	if err != nil {
		return nil, err
	}
	// Every consumer created or deleted in toolgate's account, by anyone.
	var consumers atomic.Int64
	nc := b.js.Conn()
	for _, op := range []string{"CREATED", "DELETED"} {
		sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER."+op+".>", func(*nats.Msg) { consumers.Add(1) })
		if err != nil {
			return nil, fmt.Errorf("bench: consumer advisories: %w", err)
		}
		defer sub.Unsubscribe() //nolint:errcheck // the connection closes after
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		return nil, fmt.Errorf("bench: consumer advisories: %w", err)
	}
	run := "b" + randomHex(4)
	for _, p := range paths {
		// A lifecycle an agent first, not measured: what a deployment
		// does once (connections, an executor's first request for work,
		// a cluster's streams settling after a start) is not a rate.
		if _, _, err := b.lifecycles(ctx, run+"-warm-"+p, p, agents, agents, &started); err != nil {
			return nil, err
		}
		before, beforeMsgs, beforeConsumers, began := cpu(), msgs(), consumers.Load(), time.Now()
		res, decisions, err := b.lifecycles(ctx, run+"-"+p, p, agents, calls, &started)
		if err != nil {
			return nil, err
		}
		if spent := cpu() - before; spent > 0 {
			res.CPUMs = float64(spent.Microseconds()) / 1000 / float64(calls)
		}
		if sent := msgs() - beforeMsgs; sent > 0 {
			res.Messages = float64(sent) / float64(calls)
		}
		// An advisory is sent as its consumer is created, before the
		// answer: a round trip after the last lifecycle has them all.
		if err := nc.FlushTimeout(10 * time.Second); err != nil {
			return nil, fmt.Errorf("bench: consumer advisories: %w", err)
		}
		res.Consumers = float64(consumers.Load()-beforeConsumers) / float64(calls)
		if len(decisions) > 0 {
			// A read, asked again: on a cluster just started it was
			// once refused ("no responders").
			for attempt := 1; ; attempt++ {
				if res.Hops, err = b.hops(ctx, began, maps.Clone(decisions)); err == nil || attempt == 3 || ctx.Err() != nil {
					break
				}
			}
			if err != nil {
				return nil, err
			}
		}
		r.Paths = append(r.Paths, res)
	}
	cas2, err := runCAS(ctx, kv, agents, calls)
	if err != nil {
		return nil, err
	}
	r.CASPerSec = float64(2*calls) / (cas1 + cas2).Seconds()
	for i := range r.Paths {
		r.Paths[i].Ratio = r.Paths[i].PerSec / r.CASPerSec
	}
	return r, nil
}

// runCAS makes n compare-and-set updates by writers writers, each on
// a key of its own, and says how long they took.
func runCAS(ctx context.Context, kv jetstream.KeyValue, writers, n int) (time.Duration, error) {
	value := make([]byte, 600) // about an entry's size
	var next atomic.Int64
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			key := fmt.Sprint("k", w)
			rev, err := kv.Put(ctx, key, value)
			for err == nil && next.Add(1) <= int64(n) {
				rev, err = kv.Update(ctx, key, value, rev)
			}
			errs <- err
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, fmt.Errorf("bench: CAS baseline: %w", err)
		}
	}
	return took, nil
}

// lifecycles runs calls lifecycles of one path, agents at a time; on the
// approval path, it says when each call was decided and its handler
// started.
func (b *parties) lifecycles(ctx context.Context, conversation, path string, agents, calls int, started *sync.Map) (Path, map[string]decision, error) {
	tool := AutoTool
	if path == "approval" {
		tool = ApprovalTool
	}
	var next atomic.Int64
	var mu sync.Mutex
	var submitResult, decideHandler []time.Duration
	decisions := map[string]decision{}
	errs := make(chan error, agents)
	var wg sync.WaitGroup
	start := time.Now()
	for range agents {
		wg.Go(func() {
			errs <- func() error {
				for i := next.Add(1); i <= int64(calls); i = next.Add(1) {
					t0 := time.Now()
					e, err := b.agent.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint("c", i), ToolName: tool, Arguments: json.RawMessage(`{}`), ConversationID: conversation})
					if err != nil {
						return err
					}
					if (e.Status == machine.StatePendingApproval) != (path == "approval") {
						return fmt.Errorf("bench: a call of %s was %s: the policy in force must ask about %s and run %s (see toolgate bench --help)", tool, e.Status, ApprovalTool, AutoTool)
					}
					var decided time.Time
					if path == "approval" {
						decided = time.Now()
						if _, err := b.approver.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, Reason: "bench"}); err != nil {
							return err
						}
					}
					if _, err := b.agent.Await(ctx, e.PendingID, client.UntilFinished()); err != nil {
						return err
					}
					took := time.Since(t0)
					mu.Lock()
					submitResult = append(submitResult, took)
					if v, ok := started.LoadAndDelete(e.PendingID); ok && !decided.IsZero() {
						d := v.(decision)
						d.decided = decided
						decideHandler = append(decideHandler, d.handler.Sub(decided))
						decisions[e.PendingID] = d
					}
					mu.Unlock()
				}
				return nil
			}()
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return Path{}, nil, err
		}
	}
	p := Path{Name: path, PerSec: float64(calls) / took.Seconds(), SubmitResult: percentiles(submitResult)}
	if path == "approval" {
		dh := percentiles(decideHandler)
		p.DecideHandler = &dh
	}
	return p, decisions, nil
}

// decision is when the bench sent a call's decision and when its
// handler started, and when what each step between stored was stored.
type decision struct {
	decided, handler time.Time
	// By the NATS server's clock: the approval and the claim in
	// tool_calls.
	committed, claimed time.Time
}

// steps name the steps between a decision's times, in order.
var steps = [...]string{"decision→committed", "committed→claimed", "claimed→handler"}

// hops splits decision→handler at the timestamps the NATS server gave
// what each step stored, the revisions read back from tool_calls' stream
// since the path began: the bench runs where toolgate's server does (it
// needs its --data), so the clocks are one machine's.
func (b *parties) hops(ctx context.Context, since time.Time, ds map[string]decision) ([]Hop, error) {
	prefix := "$KV." + wire.CallsBucket + "."
	stream := "KV_" + wire.CallsBucket
	c, err := b.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + ">"}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err != nil {
		return nil, fmt.Errorf("bench: reading %s: %w", stream, err)
	}
	for pending := uint64(1); pending > 0; {
		// Asked for more than the stream holds, a fetch waits out its
		// MaxWait: ask for what is left (the first revision tells).
		batch, err := c.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("bench: reading %s: %w", stream, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("bench: reading %s: %w", stream, err)
			}
			pending = md.NumPending
			id := strings.TrimPrefix(msg.Subject(), prefix)
			d, ok := ds[id]
			if !ok || len(msg.Data()) == 0 {
				continue
			}
			var head struct {
				Status machine.State `json:"status"`
				// Set when the approval's write claimed the call too.
				Prior *struct{} `json:"priorTransition"`
			}
			if err := wire.Unmarshal(msg.Data(), &head); err != nil {
				return nil, fmt.Errorf("bench: %s: %w", id, err)
			}
			switch {
			case head.Status == machine.StateExecuting && head.Prior != nil && d.committed.IsZero():
				d.committed, d.claimed = md.Timestamp, md.Timestamp
			case head.Status == machine.StateApproved && d.committed.IsZero():
				d.committed = md.Timestamp
			case head.Status == machine.StateExecuting && d.claimed.IsZero():
				d.claimed = md.Timestamp
			}
			ds[id] = d
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("bench: reading %s: %w", stream, err)
		} else if n == 0 {
			what := "messages"
			if pending == 1 {
				what = "message"
			}
			return nil, fmt.Errorf("bench: reading %s: nothing within 10s, %d %s still to read", stream, pending, what)
		}
	}
	took := make([][]time.Duration, len(steps))
	for id, d := range ds {
		marks := [...]time.Time{d.decided, d.committed, d.claimed, d.handler}
		for i := range steps {
			if marks[i].IsZero() || marks[i+1].IsZero() {
				return nil, fmt.Errorf("bench: %s: %s not found in the streams", id, steps[i])
			}
			took[i] = append(took[i], marks[i+1].Sub(marks[i]))
		}
	}
	hops := make([]Hop, len(steps))
	for i, name := range steps {
		hops[i] = Hop{Name: name, Percentiles: percentiles(took[i])}
	}
	return hops, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The tools the bench's calls name: the policy must ask a human about the
// first and run the second at once (an embedded toolgate's does).
const (
	benchApprovalTool = "bench_approval"
	benchAutoTool     = "bench_auto"
	benchPolicy       = "default:\n  requiresApprovalTools: [" + benchApprovalTool + "]\n  approvalTimeoutMs: 600000\n"
)

// benchReport is what `toolgate bench` measured.
type benchReport struct {
	Agents int    `json:"agents"`
	Calls  int    `json:"calls"` // lifecycles a path
	Target string `json:"target"`
	// Sync is how the embedded server synced its writes (--sync).
	Sync string `json:"sync,omitempty"`
	// CASPerSec is the raw KV compare-and-set rate of the same server, in
	// the same run, by as many writers as agents: the baseline, on a
	// bucket of CASReplicas replicas, as many as toolgate's calls have.
	CASPerSec   float64      `json:"casPerSec"`
	CASReplicas int          `json:"casReplicas"`
	Paths       []benchPath  `json:"paths"`
	Host        benchHostEnv `json:"host"`
}

type benchHostEnv struct {
	CPUs int    `json:"cpus"`
	Load string `json:"load,omitempty"` // /proc/loadavg at the start
}

// benchPath is one kind of lifecycle's figures.
type benchPath struct {
	Name          string  `json:"name"` // approval, auto
	PerSec        float64 `json:"lifecyclesPerSec"`
	Ratio         float64 `json:"ratioToCAS"` // PerSec / CASPerSec
	SubmitResult  pcts    `json:"submitToResultMs"`
	DecideHandler *pcts   `json:"decisionToHandlerMs,omitempty"`
	// Hops splits decision→handler at the timestamps the NATS server gave
	// what each step stored (the approval path only).
	Hops []benchHop `json:"decisionToHandlerHops,omitempty"`
	// CPUMs is the CPU time per lifecycle of the process measured: this
	// one with --embedded (toolgate and the bench's clients), serve's
	// with --serve-pid; 0 when neither.
	CPUMs float64 `json:"cpuMsPerLifecycle,omitempty"`
	// Messages is how many messages the NATS server took in and sent
	// out per lifecycle, over every connection (toolgate's, the
	// bench's; on a cluster, every server's, routes included); 0 when
	// the bench cannot read the servers' statistics.
	Messages float64 `json:"messagesPerLifecycle,omitempty"`
	// Consumers is how many JetStream consumers were created or deleted
	// per lifecycle (JetStream's advisories in toolgate's account): 0
	// when no call costs one, as none should.
	Consumers float64 `json:"consumersPerLifecycle"`
}

// benchHop is one step of decision→handler, from what one stored to what
// the next did: the decision committed (the approval's revision in
// tool_calls), the call claimed (its EXECUTING revision: toolgate's work
// queue saw the approval and claimed it for an executor; the approval's
// own, when its write claimed the call for the executor waiting), the
// handler started.
type benchHop struct {
	Name string `json:"name"`
	pcts
}

type pcts struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// benchCmd is `toolgate bench`.
func benchCmd(out cliOutput) *cliCmd {
	c := newCLICmd("bench", "bench [--embedded [--roles ROLES] [--sync interval|always|both]] [--agents N] [--calls N] [--path approval|auto|both] [--cpuprofile FILE] [--json]",
		"Measure toolgate: lifecycles per second and their latencies, against the raw KV\n"+
			"compare-and-set rate of the same server measured in the same run (the ratio is the\n"+
			"figure comparable across machines). An approval lifecycle is an agent submitting a\n"+
			"call of "+benchApprovalTool+", an approver approving it, an executor running a handler that\n"+
			"does nothing and the agent getting the result; an auto-run one is the same for\n"+
			benchAutoTool+", which the policy runs without asking. Each party holds its role's credential.\n\n"+
			"With --embedded, a toolgate of its own in a temporary directory, running the roles\n"+
			"--roles names (by default relay,intake,timer: what a lifecycle needs, the bench\n"+
			"hosting the executor; --roles all measures a whole serve, its http role on a free\n"+
			"port, its notifier, analytics and executor beside). Otherwise the\n"+
			"toolgate at --nats, whose --data holds the role credentials (run it where serve\n"+
			"runs), and whose policy must ask about "+benchApprovalTool+" and run "+benchAutoTool+":\n\n"+
			"  "+strings.ReplaceAll(benchPolicy, "\n", "\n  "), out)
	c.connFlags()
	embedded := c.fs.Bool("embedded", false, "measure a toolgate of the bench's own, with its policy")
	agents := c.fs.Int("agents", 32, "agents submitting at once (and CAS writers)")
	calls := c.fs.Int("calls", 2000, "lifecycles a path")
	path := c.fs.String("path", "both", "approval, auto or both")
	roles := server.Roles{"relay", "intake", "timer"}
	c.fs.Var(&roles, "roles", "with --embedded, the roles its toolgate runs: all, or a comma-separated list of "+strings.Join(server.RoleNames(), ","))
	servePID := c.fs.Int("serve-pid", 0, "process ID of a toolgate serve on this machine, whose CPU time to report per lifecycle")
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	syncMode := c.fs.String("sync", server.SyncInterval, "with --embedded, when its server's writes reach the disk: interval, always, or both (the bench twice, and the cost of always against interval)")
	cpuProfile := c.fs.String("cpuprofile", "", "write a CPU profile of the bench's process (with --embedded, toolgate's too) to this file, for go tool pprof")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		var paths []string
		switch *path {
		case "both":
			paths = []string{"approval", "auto"}
		case "approval", "auto":
			paths = []string{*path}
		default:
			return c.usagef("--path: approval, auto or both, got %q", *path)
		}
		if *agents < 1 || *calls < 1 {
			return c.usagef("--agents and --calls: at least 1")
		}
		// A running toolgate runs the roles it was started with: --roles is
		// for --embedded only (and TOOLGATE_ROLES, serve's, may be set).
		if need := []string{"relay", "intake", "timer"}; *embedded && slices.ContainsFunc(need, func(r string) bool { return !slices.Contains(roles.Resolve(), r) }) {
			return c.usagef("--roles: a lifecycle needs %s, got %s", strings.Join(need, ","), roles.String())
		}

		switch *syncMode {
		case server.SyncInterval, server.SyncAlways, "both":
		default:
			return c.usagef("--sync: interval, always or both, got %q", *syncMode)
		}
		syncs := []string{*syncMode}
		switch {
		case *syncMode == "both":
			syncs = []string{server.SyncInterval, server.SyncAlways}
		case !*embedded && *syncMode != server.SyncInterval:
			return c.usagef("--sync: with --embedded only (the servers at --nats sync as their own config says)")
		}

		// measure runs the bench once: against a toolgate of its own whose
		// server syncs as sync says, with --embedded.
		measure := func(sync string) (*benchReport, error) {
			cfg, data := c.conn, c.data
			cpu := func() time.Duration { return 0 }
			msgs := func() int64 { return 0 }
			target := cfg.URLs
			if *embedded {
				m, stop, err := startBenchToolgate(ctx, roles, sync)
				if err != nil {
					return nil, err
				}
				defer stop()
				cfg = bus.ConnConfig{URLs: m.NATSURL()}
				data, target = m.Config.Data, "embedded"
				cpu = selfCPU
				msgs = func() int64 {
					in, out, _ := m.ServerMessages()
					return in + out
				}
			} else {
				if *servePID > 0 {
					cpu = func() time.Duration { return processCPU(*servePID) }
				}
				// The servers' own count, read with a system credential made from
				// --data's keys, where there are keys to make one.
				if count, closeCount, err := serverMessages(cfg, data); err == nil {
					defer closeCount()
					msgs = count
				}
			}
			b, err := newBench(cfg, data)
			if err != nil {
				return nil, err
			}
			defer b.close()
			report, err := b.run(ctx, *agents, *calls, paths, cpu, msgs)
			if err != nil {
				return nil, err
			}
			report.Target = target
			if *embedded {
				report.Sync = sync
			}
			return report, nil
		}
		var reports []*benchReport
		for _, sync := range syncs {
			report, err := measure(sync)
			if err != nil {
				return err
			}
			reports = append(reports, report)
		}
		if *asJSON {
			enc := json.NewEncoder(out.stdout)
			enc.SetIndent("", "  ")
			if len(reports) == 1 {
				return enc.Encode(reports[0])
			}
			return enc.Encode(reports)
		}
		for i, r := range reports {
			if i > 0 {
				fmt.Fprintln(out.stdout)
			}
			r.print(out.stdout)
		}
		if len(reports) == 2 {
			printSyncCost(out.stdout, reports[0], reports[1])
		}
		return nil
	}
	return c
}

// startBenchToolgate runs a toolgate of the bench's own: an embedded
// server in a temporary directory, the bench's policy, the roles given
// (by default those a lifecycle needs: the bench hosts the executor). An
// http role serves on a free port.
func startBenchToolgate(ctx context.Context, roles server.Roles, sync string) (*server.Main, func(), error) {
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
	if err := os.WriteFile(cfg.PolicyFile, []byte(benchPolicy), 0o600); err != nil {
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

// bench holds a connection per party, each with its role's credential.
type bench struct {
	conns                     []*nats.Conn
	agent, approver, executor *client.Client
	js                        jetstream.JetStream // toolgate's own, for the CAS baseline
}

func newBench(cfg bus.ConnConfig, data string) (*bench, error) {
	b := &bench{}
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

func (b *bench) close() {
	for _, nc := range b.conns {
		nc.Close()
	}
}

// run measures CAS, then each path, then CAS again, so that a server
// speeding up or slowing down weighs on both sides alike.
func (b *bench) run(ctx context.Context, agents, calls int, paths []string, cpu func() time.Duration, msgs func() int64) (*benchReport, error) {
	r := &benchReport{Agents: agents, Calls: calls, Host: benchHost()}
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
	var started sync.Map // pending ID: benchDecision, with the handler's start
	handler := func(_ context.Context, call client.Call) (client.Result, error) {
		started.Store(call.PendingID, benchDecision{handler: time.Now()})
		return client.Result{Output: json.RawMessage(`true`)}, nil
	}
	x.Handle(benchApprovalTool, handler)
	x.Handle(benchAutoTool, handler)
	xctx, stopExecutor := context.WithCancel(ctx)
	var xdone sync.WaitGroup
	xdone.Go(func() { _ = x.Run(xctx) })
	defer func() { stopExecutor(); xdone.Wait() }()

	cas1, err := runBenchCAS(ctx, kv, agents, calls)
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
	cas2, err := runBenchCAS(ctx, kv, agents, calls)
	if err != nil {
		return nil, err
	}
	r.CASPerSec = float64(2*calls) / (cas1 + cas2).Seconds()
	for i := range r.Paths {
		r.Paths[i].Ratio = r.Paths[i].PerSec / r.CASPerSec
	}
	return r, nil
}

// runBenchCAS makes n compare-and-set updates by writers writers, each on
// a key of its own, and says how long they took.
func runBenchCAS(ctx context.Context, kv jetstream.KeyValue, writers, n int) (time.Duration, error) {
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
func (b *bench) lifecycles(ctx context.Context, conversation, path string, agents, calls int, started *sync.Map) (benchPath, map[string]benchDecision, error) {
	tool := benchAutoTool
	if path == "approval" {
		tool = benchApprovalTool
	}
	var next atomic.Int64
	var mu sync.Mutex
	var submitResult, decideHandler []time.Duration
	decisions := map[string]benchDecision{}
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
						return fmt.Errorf("bench: a call of %s was %s: the policy in force must ask about %s and run %s (see toolgate bench --help)", tool, e.Status, benchApprovalTool, benchAutoTool)
					}
					var decided time.Time
					if path == "approval" {
						decided = time.Now()
						if _, err := b.approver.Decide(ctx, e.PendingID, client.Decision{Approve: true, Reason: "bench"}); err != nil {
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
						d := v.(benchDecision)
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
			return benchPath{}, nil, err
		}
	}
	p := benchPath{Name: path, PerSec: float64(calls) / took.Seconds(), SubmitResult: percentiles(submitResult)}
	if path == "approval" {
		dh := percentiles(decideHandler)
		p.DecideHandler = &dh
	}
	return p, decisions, nil
}

// benchDecision is when the bench sent a call's decision and when its
// handler started, and when what each step between stored was stored.
type benchDecision struct {
	decided, handler time.Time
	// By the NATS server's clock: the approval and the claim in
	// tool_calls.
	committed, claimed time.Time
}

// benchSteps name the steps between a benchDecision's times, in order.
var benchSteps = [...]string{"decision→committed", "committed→claimed", "claimed→handler"}

// hops splits decision→handler at the timestamps the NATS server gave
// what each step stored, the revisions read back from tool_calls' stream
// since the path began: the bench runs where toolgate's server does (it
// needs its --data), so the clocks are one machine's.
func (b *bench) hops(ctx context.Context, since time.Time, ds map[string]benchDecision) ([]benchHop, error) {
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
			return nil, fmt.Errorf("bench: reading %s: nothing within 10s, %s still to read", stream, counted(pending, "message", "messages"))
		}
	}
	took := make([][]time.Duration, len(benchSteps))
	for id, d := range ds {
		marks := [...]time.Time{d.decided, d.committed, d.claimed, d.handler}
		for i := range benchSteps {
			if marks[i].IsZero() || marks[i+1].IsZero() {
				return nil, fmt.Errorf("bench: %s: %s not found in the streams", id, benchSteps[i])
			}
			took[i] = append(took[i], marks[i+1].Sub(marks[i]))
		}
	}
	hops := make([]benchHop, len(benchSteps))
	for i, name := range benchSteps {
		hops[i] = benchHop{Name: name, pcts: percentiles(took[i])}
	}
	return hops, nil
}

func percentiles(ds []time.Duration) pcts {
	if len(ds) == 0 {
		return pcts{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return pcts{P50: ms(ds[len(ds)/2]), P99: ms(ds[len(ds)*99/100]), Max: ms(ds[len(ds)-1])}
}

func (r *benchReport) print(w io.Writer) {
	target := r.Target
	if r.Sync != "" {
		target += ", sync " + r.Sync
	}
	fmt.Fprintf(w, "toolgate bench: %s, %s, %s a path, %s, load %s\n\n", target, counted(r.Agents, "agent", "agents"),
		counted(r.Calls, "lifecycle", "lifecycles"), counted(r.Host.CPUs, "CPU", "CPUs"), r.Host.Load)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tPER SEC\tRATIO TO CAS\tSUBMIT→RESULT p50/p99\tDECISION→HANDLER p50/p99\tCPU/LIFECYCLE\tMESSAGES/LIFECYCLE\tCONSUMERS/LIFECYCLE")
	fmt.Fprintf(tw, "raw KV compare-and-set (R%d)\t%.0f\t1\t\t\t\t\t\n", r.CASReplicas, r.CASPerSec)
	for _, p := range r.Paths {
		dh, cpu, msgs := "", "", ""
		if p.DecideHandler != nil {
			dh = fmt.Sprintf("%.1f / %.1f ms", p.DecideHandler.P50, p.DecideHandler.P99)
		}
		if p.CPUMs > 0 {
			cpu = fmt.Sprintf("%.2f ms", p.CPUMs)
		}
		if p.Messages > 0 {
			msgs = fmt.Sprintf("%.0f", p.Messages)
		}
		fmt.Fprintf(tw, "%s lifecycles\t%.0f\t1/%.0f\t%.1f / %.1f ms\t%s\t%s\t%s\t%.2f\n", p.Name, p.PerSec, 1/p.Ratio, p.SubmitResult.P50, p.SubmitResult.P99, dh, cpu, msgs, p.Consumers)
	}
	tw.Flush()
	if r.CASReplicas > 1 && slices.ContainsFunc(r.Paths, func(p benchPath) bool { return p.Messages > 0 }) {
		fmt.Fprintln(w, "\nmessages: every server's, so a message that crosses a route or is replicated counts on each, with the cluster's own traffic")
	}
	for _, p := range r.Paths {
		if len(p.Hops) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: decision→handler by step, p50 / p99 / max (the server's timestamps of what each stored)\n", p.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, h := range p.Hops {
			fmt.Fprintf(tw, "  %s\t%.2f / %.2f / %.1f ms\n", h.Name, h.P50, h.P99, h.Max)
		}
		tw.Flush()
	}
}

// printSyncCost says what syncing every write cost, always's figures
// against interval's, measured in the same run.
func printSyncCost(w io.Writer, interval, always *benchReport) {
	fmt.Fprintln(w, "\nsync always against interval, in this run:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  raw KV compare-and-set\t%.2f× the rate\n", always.CASPerSec/interval.CASPerSec)
	for i, p := range always.Paths {
		q := interval.Paths[i]
		fmt.Fprintf(tw, "  %s lifecycles\t%.2f× the rate\tsubmit→result p50 %.2f×\n", p.Name, p.PerSec/q.PerSec, p.SubmitResult.P50/q.SubmitResult.P50)
	}
	tw.Flush()
}

func benchHost() benchHostEnv {
	h := benchHostEnv{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return h
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time process pid has used, from /proc (0 where
// there is none).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses:
	// utime and stime are the 14th and 15th of the line, in clock ticks.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serverMessages returns a counter of the messages the NATS servers of
// cfg took in and sent, all of them together ($SYS.REQ.SERVER.PING.VARZ),
// asked with a system account credential made from data's keys.
func serverMessages(cfg bus.ConnConfig, data string) (count func() int64, closeCount func(), err error) {
	creds, err := server.SystemCreds(data)
	if err != nil {
		return nil, nil, err
	}
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return nil, nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(creds)
	if err != nil {
		return nil, nil, err
	}
	seed, _ := kp.Seed()
	cc := bus.ConnConfig{URLs: cfg.URLs, TLSCA: cfg.TLSCA, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, Name: "toolgate bench: server statistics"}
	nc, err := bus.Connect(cc, nats.UserJWTAndSeed(token, string(seed)))
	if err != nil {
		return nil, nil, err
	}
	count = func() int64 {
		replies := make(chan *nats.Msg, 16)
		inbox := nats.NewInbox()
		sub, err := nc.ChanSubscribe(inbox, replies)
		if err != nil {
			return 0
		}
		defer sub.Unsubscribe() //nolint:errcheck // a read's end
		if nc.PublishRequest("$SYS.REQ.SERVER.PING.VARZ", inbox, nil) != nil {
			return 0
		}
		// Every server answers: the first within a second, the others
		// soon after it.
		var total int64
		wait := time.NewTimer(time.Second)
		defer wait.Stop()
		for {
			select {
			case m := <-replies:
				var r struct {
					Data struct {
						InMsgs  int64 `json:"in_msgs"`
						OutMsgs int64 `json:"out_msgs"`
					} `json:"data"`
				}
				if json.Unmarshal(m.Data, &r) == nil {
					total += r.Data.InMsgs + r.Data.OutMsgs
				}
				wait.Reset(100 * time.Millisecond)
			case <-wait.C:
				return total
			}
		}
	}
	return count, nc.Close, nil
}

package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkServeRestart measures a restart of `toolgate serve` (the real
// binary, every role, its embedded NATS server) on a data directory
// holding n open calls: PENDING_APPROVAL entries of about 700 bytes (a
// receipt each), their approval deadlines a month away.
//
// The fixture is written once, outside the timer: a first serve
// provisions the directory, the calls are published straight into the
// bucket's stream, and serve runs until every consumer of the bucket and
// of TOOL_EVENTS has caught up (the relay relayed them, the analytics
// counted them), then stops, as a toolgate that had been running would.
// Each iteration then starts serve on it and reports:
//
//   - serving-ms: from the process's start to "toolgate serving" (the
//     embedded server recovered its streams, the request API answers);
//   - load-ms: from the process's start to the timer's "timer started"
//     (every deadline known), and timer-ms the timer's read of the bucket
//     alone (the line's load);
//   - submit-ms: from the process's start to the first submit accepted,
//     an agent's, with the agent credential, through the request API;
//   - raw-ms: the baseline, the same read of the bucket as the timer's
//     (kv.WatchAll, to the end of the initial values) by a bare client of
//     the same server once serve has settled, decoding nothing; load-x is
//     timer-ms over it;
//   - rss-loaded-MiB: VmRSS once the timer has loaded, the submit was
//     accepted and the pending-approvals gauge counts every call (the
//     process's one watch of the bucket feeds the timer, the call index
//     and the gauge alike); rss-MiB: VmRSS once it is
//     steady (five readings 200ms apart within 1 MiB); hwm-MiB: VmHWM,
//     the peak; heap-MiB: the Go heap in use then (its /metrics).
//
// ns/op is a restart's whole iteration and means little; use -benchtime 1x.
// TOOLGATE_BENCH_SERVE=PATH restarts that toolgate binary instead of one
// built from this tree (the fixture too), to compare two builds on one
// machine in one sitting; TOOLGATE_BENCH_DATA=DIR keeps the fixtures
// there for the next run (see restartFixture).
//
// The open=1k/finished=N sub-benchmarks hold 1k such open calls and N
// finished ones besides, written before them: COMPLETED_SUCCESS entries
// of about 3.2 KB (a result, four receipts), finished twenty minutes
// before the fixture was written, so inside the retention window: every
// serve of the benchmark runs with --retention 720h, so that a fixture
// kept (TOOLGATE_BENCH_DATA) stays inside it for a month. They show what
// a restart costs a finished call: nothing is due for them, but the
// process reads them all.
//
// open=10k, open=100k and open=1k/finished=0, 10k and 100k run by
// default (those of 100k not with -short); open=1M only with
// TOOLGATE_BENCH_1M=1, and it writes its fixture for minutes:
//
//	go test -run '^$' -bench ServeRestart -benchtime 1x ./cmd/toolgate
//	go test -run '^$' -bench 'ServeRestart/open=1k/' -benchtime 1x ./cmd/toolgate
//	TOOLGATE_BENCH_1M=1 go test -run '^$' -bench 'ServeRestart/open=1000k' -benchtime 1x -timeout 2h ./cmd/toolgate
func BenchmarkServeRestart(b *testing.B) {
	sizes := []restartSize{{open: 10_000}, {open: 100_000}}
	if os.Getenv("TOOLGATE_BENCH_1M") != "" {
		sizes = append(sizes, restartSize{open: 1_000_000})
	}
	for _, finished := range []int{0, 10_000, 100_000} {
		sizes = append(sizes, restartSize{open: 1_000, finished: finished, named: true})
	}
	for _, n := range sizes {
		b.Run(n.String(), func(b *testing.B) {
			if n.open+n.finished > 20_000 && testing.Short() {
				b.Skip("-short")
			}
			benchServeRestart(b, n)
		})
	}
}

// restartSize is a restart fixture's: how many open calls, how many
// finished ones.
type restartSize struct {
	open, finished int
	// named: the finished count is in the name even when 0.
	named bool
}

// String names the sub-benchmark: open=10k, open=1k/finished=10k.
func (n restartSize) String() string {
	k := func(v int) string {
		if v == 0 {
			return "0"
		}
		return fmt.Sprintf("%dk", v/1000)
	}
	if n.finished == 0 && !n.named {
		return "open=" + k(n.open)
	}
	return "open=" + k(n.open) + "/finished=" + k(n.finished)
}

// dir names the fixture's directory: open=10k as it always has,
// open=1k-finished=10k.
func (n restartSize) dir() string { return strings.ReplaceAll(n.String(), "/", "-") }

func benchServeRestart(b *testing.B, n restartSize) {
	data := restartFixture(b, n)

	var sum restartFigures
	iterations := 0
	for b.Loop() {
		f := restartOnce(b, newServeArgs(b, data), n)
		b.Logf("%+v", f)
		sum.add(f)
		iterations++
	}
	avg := func(v float64) float64 { return v / float64(iterations) }
	b.ReportMetric(avg(sum.serving), "serving-ms")
	b.ReportMetric(avg(sum.load), "load-ms")
	b.ReportMetric(avg(sum.timer), "timer-ms")
	b.ReportMetric(avg(sum.submit), "submit-ms")
	b.ReportMetric(avg(sum.raw), "raw-ms")
	b.ReportMetric(sum.timer/sum.raw, "load-x")
	b.ReportMetric(avg(sum.rssLoaded), "rss-loaded-MiB")
	b.ReportMetric(avg(sum.rss), "rss-MiB")
	b.ReportMetric(avg(sum.hwm), "hwm-MiB")
	b.ReportMetric(avg(sum.heap), "heap-MiB")
}

// restartFigures are one restart's measures, in ms and MiB.
type restartFigures struct {
	serving, load, timer, submit, raw float64
	rssLoaded, rss, hwm, heap         float64
}

func (s *restartFigures) add(f restartFigures) {
	s.serving += f.serving
	s.load += f.load
	s.timer += f.timer
	s.submit += f.submit
	s.raw += f.raw
	s.rssLoaded += f.rssLoaded
	s.rss += f.rss
	s.hwm += f.hwm
	s.heap += f.heap
}

// serveArgs are a serve's on data: every role, its own ports.
type serveArgs struct {
	data, listen, metrics string
}

func newServeArgs(b *testing.B, data string) serveArgs {
	return serveArgs{data: data, listen: fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(b)), metrics: fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(b))}
}

// benchRetention is the benchmark's --retention: the finished calls of
// a fixture kept for the next run stay inside it.
const benchRetention = "720h"

func (a serveArgs) list() []string {
	return []string{"--data", a.data, "--listen", a.listen, "--http", "127.0.0.1:0", "--metrics", a.metrics, "--retention", benchRetention}
}

// restartOnce starts serve on a's data, holding n's calls, measures it
// and stops it.
func restartOnce(b *testing.B, a serveArgs, n restartSize) restartFigures {
	data := a.data
	var f restartFigures
	timerLine := regexp.MustCompile(`timer started.* entries=(\d+) .*load=(\S+)`)
	serving, loaded := make(chan time.Duration, 1), make(chan time.Duration, 1)
	var timerLoad time.Duration
	var entries int
	t0 := time.Now()
	p := startProcess(b, a.list(), func(line string) {
		switch {
		case strings.Contains(line, "toolgate serving"):
			serving <- time.Since(t0)
		case strings.Contains(line, "timer started"):
			at := time.Since(t0)
			if m := timerLine.FindStringSubmatch(line); m != nil {
				entries, _ = strconv.Atoi(m[1])
				timerLoad, _ = time.ParseDuration(m[2])
			}
			loaded <- at
		}
	})
	defer p.stop(b)
	url := "nats://" + a.listen

	// The agent connects as soon as it can, and submits at once.
	submitted := make(chan time.Duration, 1)
	go func() {
		submitted <- func() time.Duration {
			connected := make(chan struct{})
			opts, err := client.Credentials(server.CredsPath(data, "agent"))
			if err != nil {
				b.Error(err)
				return 0
			}
			opts = append(opts, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
				nats.ConnectHandler(func(*nats.Conn) { close(connected) }))
			nc, err := nats.Connect(url, opts...)
			if err != nil {
				b.Error(err)
				return 0
			}
			defer nc.Close()
			if nc.IsConnected() {
				close(connected)
			}
			select {
			case <-connected:
			case <-p.done:
				return 0
			}
			c, err := client.New(nc)
			if err != nil {
				b.Error(err)
				return 0
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err = c.Submit(ctx, machine.Call{ToolCallID: fmt.Sprintf("restart-%d", time.Now().UnixNano()), ToolName: "send_email",
				Arguments: json.RawMessage(`{"to":"ops@example.com"}`), ConversationID: "restart-bench"})
			if err != nil {
				b.Errorf("submit: %v", err)
				return 0
			}
			return time.Since(t0)
		}()
	}()
	wait := func(c <-chan time.Duration, what string) time.Duration {
		select {
		case d := <-c:
			return d
		case <-p.done:
			b.Fatalf("serve exited before %s:\n%s", what, p.output())
		case <-time.After(30 * time.Minute):
			b.Fatalf("no %s after 30 minutes:\n%s", what, p.output())
		}
		return 0
	}
	f.serving = ms(wait(serving, "serving"))
	f.load = ms(wait(loaded, "timer started"))
	f.timer = ms(timerLoad)
	require.GreaterOrEqual(b, entries, n.open+n.finished, "the timer read every call")
	f.submit = ms(wait(submitted, "submit"))
	require.NotZero(b, f.submit, "submit accepted")

	// Every watch of the bucket has caught up: the process has read all
	// it reads at start. The call index and the pending gauge start
	// reading after the timer: once the gauge counts every call, both
	// watches exist.
	bustest.Eventually(b, 30*time.Minute, 100*time.Millisecond, "the pending gauge counts every open call", func() (bool, any) { got := pendingGauge(b, a.metrics); return got >= float64(n.open), got })
	nc, err := nats.Connect(url, nats.UserCredentials(server.CredsPath(data, "toolgate")))
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	waitCaughtUp(b, js, "KV_"+wire.CallsBucket)
	pid := p.cmd.Process.Pid
	f.rssLoaded = procStatusMiB(b, pid, "VmRSS")
	f.rss = steadyRSS(b, pid)
	f.hwm = procStatusMiB(b, pid, "VmHWM")
	f.heap = heapInUseMiB(b, a.metrics)

	// The baseline: the timer's read of the bucket, decoding nothing.
	kv, err := js.KeyValue(context.Background(), wire.CallsBucket)
	require.NoError(b, err)
	rawStart := time.Now()
	w, err := kv.WatchAll(context.Background(), jetstream.IgnoreDeletes())
	require.NoError(b, err)
	read := 0
	for kve := range w.Updates() {
		if kve == nil {
			break
		}
		read++
	}
	f.raw = ms(time.Since(rawStart))
	require.NoError(b, w.Stop())
	require.GreaterOrEqual(b, read, n.open+n.finished)
	return f
}

// restartFixture returns a data directory holding n's calls: a
// temporary one, written now, or with TOOLGATE_BENCH_DATA=DIR,
// DIR/open=Nk (DIR/open=Nk-finished=Mk), written by the first run and
// kept for the next (a restart adds only the one call it submits), so
// that two builds restart on the same fixture and 1M's is written once.
func restartFixture(b *testing.B, n restartSize) string {
	dir := os.Getenv("TOOLGATE_BENCH_DATA")
	if dir == "" {
		dir = b.TempDir()
	} else {
		dir = filepath.Join(dir, n.dir())
		marker := filepath.Join(dir, "fixture-written")
		if _, err := os.Stat(marker); err == nil {
			b.Logf("%d open and %d finished calls in %s, written before", n.open, n.finished, dir)
			return dir
		}
		require.NoError(b, os.RemoveAll(dir)) // a fixture not finished
		require.NoError(b, os.MkdirAll(dir, 0o700))
		defer func() {
			if !b.Failed() {
				require.NoError(b, os.WriteFile(marker, nil, 0o600))
			}
		}()
	}
	start := time.Now()
	writeRestartFixture(b, newServeArgs(b, dir), n)
	b.Logf("%d open and %d finished calls written and relayed in %v", n.open, n.finished, time.Since(start).Round(time.Millisecond))
	return dir
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeRestartFixture provisions data with a first serve, writes n's
// finished calls and then its open ones into its bucket, waits until
// serve's consumers have caught up with them and stops it.
func writeRestartFixture(b *testing.B, a serveArgs, n restartSize) {
	ready := make(chan struct{})
	p := startProcess(b, a.list(), func(line string) {
		if strings.Contains(line, "toolgate serving") {
			close(ready)
		}
	})
	defer p.stop(b)
	select {
	case <-ready:
	case <-p.done:
		b.Fatalf("serve exited:\n%s", p.output())
	}
	nc, err := nats.Connect("nats://"+a.listen, nats.UserCredentials(server.CredsPath(a.data, "toolgate")))
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(b, err)

	flush := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("fixture not written")
		}
	}
	now := time.Now().UnixMilli()
	tools := []string{"send_email", "deploy", "Bash"}
	const sig = "kq0CqZb2rJm0y1bHjV4Xb7l4Y5m0b1aWb4d6m9Qv8yq3pQ6xN2u7aF0cD8eJ1hK4lM5nO6pR7sT8uV9wX0yZ1A"
	const signer = "NBSB2QLMOBKIMKEWMOMFX2ZFB7MVGGQMVNY6XIXOAZ2NAP6MS3OWVHLW"
	// call is the i-th call of the fixture, requested at.
	call := func(i int, at int64) machine.Entry {
		e := machine.Entry{
			ToolCallID:        fmt.Sprintf("toolu_%012d", i),
			ConversationID:    fmt.Sprintf("conv-%05d", i%5000),
			ToolName:          tools[i%len(tools)],
			ToolArguments:     json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed","body":"The export of 2026-11-24 failed at step 3 of 7."}`),
			PolicyRevision:    3,
			CallerBotID:       fmt.Sprintf("agent-support-%d", i%7),
			RequestedAt:       at,
			Status:            machine.StatePendingApproval,
			ApprovalTimeoutAt: at + 30*24*3_600_000,
			Team:              "support",
			EstimatedCost:     0.002,
		}
		e.PendingID = machine.PendingID(e.ConversationID, e.ToolCallID)
		e.ArgumentsDigest = machine.ArgumentsDigest(e.ToolArguments)
		e.LastTransition = &machine.Transition{Event: machine.EventAsk, To: e.Status, Actor: "policy", Reason: "email leaves the company", At: at, Write: "0123456789abcdef"}
		e.Receipts = []machine.Receipt{{
			Seq: 1, PendingID: e.PendingID, ToolName: e.ToolName, Caller: e.CallerBotID, Event: machine.EventAsk, To: e.Status,
			Actor: "policy", At: at, Reason: "email leaves the company", ArgumentsDigest: e.ArgumentsDigest, Key: signer, Sig: sig,
		}}
		return e
	}
	// finish moves e on to COMPLETED_SUCCESS, approved, run and finished
	// at, with a receipt for each step.
	finish := func(e *machine.Entry, at int64) {
		step := func(ev machine.Event, from, to machine.State, actor string, t int64) {
			e.Receipts = append(e.Receipts, machine.Receipt{
				Seq: len(e.Receipts) + 1, PendingID: e.PendingID, ToolName: e.ToolName, Caller: e.CallerBotID, Event: ev, From: from, To: to,
				Actor: actor, At: t, ArgumentsDigest: e.ArgumentsDigest, Prev: "sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
				Key: signer, Sig: sig,
			})
		}
		step(machine.EventApprove, machine.StatePendingApproval, machine.StateApproved, "alice@example.com", at-3000)
		step(machine.EventStart, machine.StateApproved, machine.StateExecuting, "executor-1", at-2000)
		step(machine.EventSucceed, machine.StateExecuting, machine.StateCompletedSuccess, "executor-1", at)
		e.Receipts[len(e.Receipts)-1].ResultDigest = "sha256:d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35"
		e.Status, e.ApprovalTimeoutAt = machine.StateCompletedSuccess, 0
		e.ApprovedOrRejectedByUserID, e.DecisionTime, e.DecisionScope = "alice@example.com", at-3000, machine.ScopeOnce
		e.ExecutionAttempts, e.LastAttemptTime = 1, at-2000
		e.Result = json.RawMessage(`{"messageId":"<20261124.0001@example.com>","accepted":["ops@example.com"],"status":"sent"}`)
		e.Cost = 0.002
		e.LastTransition = &machine.Transition{Event: machine.EventSucceed, From: machine.StateExecuting, To: e.Status, Actor: "executor-1", At: at, Write: "fedcba9876543210"}
	}
	put := func(i int, e machine.Entry) {
		value, err := json.Marshal(e)
		require.NoError(b, err)
		if i == 0 || i == n.finished {
			b.Logf("a %s entry is %d bytes", e.Status, len(value))
		}
		if _, err := js.PublishAsync("$KV."+wire.CallsBucket+"."+e.PendingID, value); err != nil {
			b.Fatal(err)
		}
		if i%2000 == 1999 {
			flush()
		}
	}
	// The finished calls finished twenty minutes ago, a few ms apart, in
	// the order they are written, as the bucket would hold them.
	for i := range n.finished {
		finishedAt := now - 20*60_000 - int64(n.finished-i)
		e := call(i, finishedAt-60_000)
		finish(&e, finishedAt)
		put(i, e)
	}
	for i := n.finished; i < n.finished+n.open; i++ {
		put(i, call(i, now-int64(n.finished+n.open-i)))
	}
	flush()
	waitCaughtUp(b, js, "KV_"+wire.CallsBucket, wire.EventsStream)
}

// waitCaughtUp waits until every consumer of the streams has been
// delivered every message and has none unacknowledged.
func waitCaughtUp(b *testing.B, js jetstream.JetStream, streams ...string) {
	b.Helper()
	ctx := context.Background()
	caughtUp := func() bool {
		for _, name := range streams {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			l := s.ListConsumers(ctx)
			for ci := range l.Info() {
				if ci.NumPending > 0 || ci.NumAckPending > 0 {
					return false
				}
			}
			if l.Err() != nil {
				return false
			}
		}
		return true
	}
	bustest.Eventually(b, 30*time.Minute, 100*time.Millisecond, fmt.Sprintf("the consumers of %v caught up", streams), func() (bool, any) { ok := caughtUp(); return ok, "a consumer behind" })
}

// steadyRSS polls pid's VmRSS until five readings in a row, 200ms apart,
// are within 1 MiB of each other (at most for a minute), and returns the
// last.
func steadyRSS(b *testing.B, pid int) float64 {
	var last []float64
	bustest.Eventually(b, time.Minute, 200*time.Millisecond, "RSS steady: five readings within 1 MiB", func() (bool, any) {
		last = append(last, procStatusMiB(b, pid, "VmRSS"))
		if len(last) > 5 {
			last = last[1:]
		}
		if len(last) < 5 {
			return false, fmt.Sprintf("%v MiB", last)
		}
		lo, hi := last[0], last[0]
		for _, v := range last {
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi-lo <= 1, fmt.Sprintf("%v MiB", last)
	})
	return last[len(last)-1]
}

// procStatusMiB reads a kB field of /proc/PID/status, in MiB.
func procStatusMiB(b *testing.B, pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(b, err)
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			require.NoError(b, err)
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// heapInUseMiB is go_memstats_heap_inuse_bytes from the /metrics at addr.
func heapInUseMiB(b *testing.B, addr string) float64 {
	v, ok := metricSum(b, addr, "go_memstats_heap_inuse_bytes ")
	require.True(b, ok, "no go_memstats_heap_inuse_bytes in /metrics")
	return v / (1 << 20)
}

// pendingGauge is toolgate_pending_approvals, every team's, from the
// /metrics at addr.
func pendingGauge(b *testing.B, addr string) float64 {
	v, _ := metricSum(b, addr, "toolgate_pending_approvals{")
	return v
}

// metricSum sums the values of the lines of the /metrics at addr that
// start with prefix.
func metricSum(b *testing.B, addr, prefix string) (float64, bool) {
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(b, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	sum, found := 0.0, false
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(prefix)) {
			fields := bytes.Fields(line)
			v, err := strconv.ParseFloat(string(fields[len(fields)-1]), 64)
			require.NoError(b, err)
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// startProcess starts `toolgate serve` with args, handing each line it
// logs to onLine (on one goroutine, in order).
func startProcess(b *testing.B, args []string, onLine func(string)) *process {
	bin := os.Getenv("TOOLGATE_BENCH_SERVE")
	if bin == "" {
		bin = toolgateBinary(b)
	}
	return runServe(b, bin, args, onLine)
}

// stop stops the process as a service manager would (SIGTERM), and kills
// it if it has not stopped within a minute.
func (p *process) stop(b *testing.B) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		b.Logf("serve did not stop within a minute; killed:\n%s", p.output())
		p.kill()
	}
}

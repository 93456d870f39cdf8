package main

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
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/server"
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
// 10k and 100k run by default (100k not with -short); 1M only with
// TOOLGATE_BENCH_1M=1, and it writes its fixture for minutes:
//
//	go test -run '^$' -bench ServeRestart -benchtime 1x ./cmd/toolgate
//	TOOLGATE_BENCH_1M=1 go test -run '^$' -bench 'ServeRestart/open=1000k' -benchtime 1x -timeout 2h ./cmd/toolgate
func BenchmarkServeRestart(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if os.Getenv("TOOLGATE_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("open=%dk", n/1000), func(b *testing.B) {
			if n > 10_000 && testing.Short() {
				b.Skip("-short")
			}
			benchServeRestart(b, n)
		})
	}
}

func benchServeRestart(b *testing.B, n int) {
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
	return serveArgs{data: data, listen: fmt.Sprintf("127.0.0.1:%d", freePort(b)), metrics: fmt.Sprintf("127.0.0.1:%d", freePort(b))}
}

func (a serveArgs) list() []string {
	return []string{"--data", a.data, "--listen", a.listen, "--http", "127.0.0.1:0", "--metrics", a.metrics}
}

// restartOnce starts serve on a's data, holding n open calls, measures
// it and stops it.
func restartOnce(b *testing.B, a serveArgs, n int) restartFigures {
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
	require.GreaterOrEqual(b, entries, n, "the timer read every open call")
	f.submit = ms(wait(submitted, "submit"))
	require.NotZero(b, f.submit, "submit accepted")

	// Every watch of the bucket has caught up: the process has read all
	// it reads at start. The call index and the pending gauge start
	// reading after the timer: once the gauge counts every call, both
	// watches exist.
	require.Eventually(b, func() bool { return pendingGauge(b, a.metrics) >= float64(n) }, 30*time.Minute, 100*time.Millisecond,
		"the pending gauge counts every call")
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
	require.GreaterOrEqual(b, read, n)
	return f
}

// restartFixture returns a data directory holding n open calls: a
// temporary one, written now, or with TOOLGATE_BENCH_DATA=DIR, DIR/open=Nk,
// written by the first run and kept for the next (a restart adds only the
// one call it submits), so that two builds restart on the same fixture
// and 1M's is written once.
func restartFixture(b *testing.B, n int) string {
	dir := os.Getenv("TOOLGATE_BENCH_DATA")
	if dir == "" {
		dir = b.TempDir()
	} else {
		dir = filepath.Join(dir, fmt.Sprintf("open=%dk", n/1000))
		marker := filepath.Join(dir, "fixture-written")
		if _, err := os.Stat(marker); err == nil {
			b.Logf("%d open calls in %s, written before", n, dir)
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
	b.Logf("%d open calls written and relayed in %v", n, time.Since(start).Round(time.Millisecond))
	return dir
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeRestartFixture provisions data with a first serve, writes n open
// calls into its bucket, waits until serve's consumers have caught up
// with them and stops it.
func writeRestartFixture(b *testing.B, a serveArgs, n int) {
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
	for i := range n {
		at := now - int64(n-i)
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
			Actor: "policy", At: at, Reason: "email leaves the company", ArgumentsDigest: e.ArgumentsDigest,
			Key: "NBSB2QLMOBKIMKEWMOMFX2ZFB7MVGGQMVNY6XIXOAZ2NAP6MS3OWVHLW",
			Sig: "kq0CqZb2rJm0y1bHjV4Xb7l4Y5m0b1aWb4d6m9Qv8yq3pQ6xN2u7aF0cD8eJ1hK4lM5nO6pR7sT8uV9wX0yZ1A",
		}}
		value, err := json.Marshal(e)
		require.NoError(b, err)
		if i == 0 {
			b.Logf("an entry is %d bytes", len(value))
		}
		if _, err := js.PublishAsync("$KV."+wire.CallsBucket+"."+e.PendingID, value); err != nil {
			b.Fatal(err)
		}
		if i%2000 == 1999 {
			flush()
		}
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
	require.Eventually(b, caughtUp, 30*time.Minute, 100*time.Millisecond, "consumers of %v caught up", streams)
}

// steadyRSS polls pid's VmRSS until five readings in a row, 200ms apart,
// are within 1 MiB of each other (at most for a minute), and returns the
// last.
func steadyRSS(b *testing.B, pid int) float64 {
	var last []float64
	require.Eventually(b, func() bool {
		last = append(last, procStatusMiB(b, pid, "VmRSS"))
		if len(last) > 5 {
			last = last[1:]
		}
		if len(last) < 5 {
			return false
		}
		lo, hi := last[0], last[0]
		for _, v := range last {
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi-lo <= 1
	}, time.Minute, 200*time.Millisecond, "RSS steady")
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

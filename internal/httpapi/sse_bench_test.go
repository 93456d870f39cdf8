package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// sseClients is how many inboxes and dashboards follow /v1/events at once:
// a large team's worth, all following the process's one reader of
// TOOL_EVENTS (views.EventsFeed).
const sseClients = 200

// BenchmarkSSEFanout opens sseClients event streams on one API server over
// real embedded NATS, then approves b.N pending calls one at a time and
// times, for each approval, how long until each client has read its event.
// One op is one approval and the wait for the last of the clients.
//
// The delay runs from the moment Decide is called: the transition's own
// compare-and-set, the relay reading the revision and publishing the event,
// JetStream delivering it to the process, and the HTTP handler
// writing it out. It is reported as percentiles over every (approval,
// client) pair, p50-ms and p99-ms; first-p50-ms is the median time until
// the first client had an approval (the pipeline without the fan-out), and
// all-p99-ms the 99th percentile of the time until the last one had it.
//
// Absolute times on a shared machine swing from run to run, so the figure
// to compare is "ratio": the p50 delay over the p50 of a raw KV
// compare-and-set round trip (cas-ms), measured in the same run on the same
// server, half before the approvals and half after, so a server that speeds
// up or slows down over the run weighs on both alike. The clients and the
// server share the machine's cores: 200 readers parsing events is CPU taken
// from the server, as it would be on a real gateway's host.
//
// Expect the ratio to grow with sseClients, past what one client sees (a
// few CAS round trips): one event reaches the API process once, but costs
// it sseClients handler wake-ups, decodes (for the filters) and HTTP
// writes, and even the first client waits behind that work when the cores
// are few. (When each stream had an ordered consumer of its own, the
// p50 delay at 200 clients was 2.4 times what it is with the feed.)
//
// Run it with: go test -run '^$' -bench SSE ./api/
func BenchmarkSSEFanout(b *testing.B) {
	b.StopTimer()
	env := bustest.Start(b, bustest.Topologies[0])
	ctx := context.Background()
	m := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Log: bustest.Logger()})

	bustest.RunRelay(b, env.JS)
	toks, err := httpapi.ParseTokens([]byte("viewer-token-00000001 vic viewer"))
	require.NoError(b, err)
	api, err := httpapi.New(httpapi.Config{Gate: m, Events: bustest.RunEventsFeed(b, env.JS), Tokens: toks, Log: bustest.Logger()})
	require.NoError(b, err)
	srv := httptest.NewServer(api)
	b.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })

	// The calls to approve, submitted before any client listens. Their
	// approval_required events are all relayed before the clients connect,
	// so no backlog from setup is in the first approvals' way.
	ids := make([]string, b.N)
	index := make(map[string]int, b.N)
	for i := range ids {
		e, err := m.Submit(ctx, gate.System, machine.Call{
			ToolCallID: fmt.Sprintf("call-%07d", i), ToolName: "send_email", CallerBotID: "agent-support-3",
			ConversationID: fmt.Sprintf("conv-%03d", i%64), Team: "support", EstimatedCost: 0.002,
			Arguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed"}`),
		})
		require.NoError(b, err)
		ids[i], index[e.PendingID] = e.PendingID, i
	}
	waitRelayed(b, env.JS, uint64(b.N))

	f := &fanout{
		index:     index,
		arrived:   make([]time.Duration, b.N*sseClients),
		remaining: make([]atomic.Int32, b.N),
		done:      make(chan int, 1),
		base:      time.Now(),
	}
	for i := range f.remaining {
		f.remaining[i].Store(sseClients)
	}
	f.connect(b, srv.URL)

	cas := newCASRoundTrips(b, env, ids[0])
	casTimes := cas.run(b, max(b.N/2, 50))

	starts := make([]time.Duration, b.N)
	b.StartTimer()
	for i, id := range ids {
		starts[i] = time.Since(f.base)
		if _, err := m.Decide(ctx, gate.System, wire.DecideRequest{PendingID: id, Approved: true, By: "reviewer-7", Reason: "recipient checked"}); err != nil {
			b.Fatalf("decide %s: %v", id, err)
		}
		select {
		case got := <-f.done:
			if got != i {
				b.Fatalf("approval %d reached every client while waiting for %d", got, i)
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("approval %d: %d of %d clients had it after 10s", i, sseClients-int(f.remaining[i].Load()), sseClients)
		}
	}
	b.StopTimer()
	casTimes = append(casTimes, cas.run(b, max(b.N/2, 50))...)

	// Reading arrived is safe now: every client's write for every approval
	// happened before the Add that let done fire for it.
	delays := make([]time.Duration, 0, len(f.arrived))
	first, last := make([]time.Duration, b.N), make([]time.Duration, b.N)
	for i := range b.N {
		first[i] = time.Hour
		for c := range sseClients {
			d := f.arrived[i*sseClients+c] - starts[i]
			delays = append(delays, d)
			first[i], last[i] = min(first[i], d), max(last[i], d)
		}
	}
	p50 := percentile(delays, 0.50)
	casP50 := percentile(casTimes, 0.50)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(percentile(delays, 0.99)), "p99-ms")
	b.ReportMetric(ms(percentile(first, 0.50)), "first-p50-ms")
	b.ReportMetric(ms(percentile(last, 0.99)), "all-p99-ms")
	b.ReportMetric(ms(casP50), "cas-ms")
	b.ReportMetric(float64(p50)/float64(casP50), "ratio")
}

// fanout is what the clients record: when each had each approval.
type fanout struct {
	index     map[string]int  // pendingId → approval number; read-only once the clients run
	arrived   []time.Duration // [approval*sseClients+client], since base
	remaining []atomic.Int32  // clients yet to read each approval
	done      chan int        // approval numbers every client has read
	base      time.Time
}

// connect opens every stream and starts its reader, returning once the
// server has answered them all: by then each has its consumer, so every
// event published afterwards reaches every client.
func (f *fanout) connect(b *testing.B, url string) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tr := &http.Transport{MaxIdleConnsPerHost: sseClients, DisableCompression: true}
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait(); tr.CloseIdleConnections() })
	for c := range sseClients {
		req, err := http.NewRequestWithContext(ctx, "GET", url+"/v1/events", nil)
		require.NoError(b, err)
		req.Header.Set("Authorization", "Bearer viewer-token-00000001")
		resp, err := client.Do(req)
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode)
		wg.Go(func() {
			defer resp.Body.Close()
			f.read(c, resp)
		})
	}
}

var (
	sseEventLine = []byte("event: ")
	sseDataLine  = []byte("data: ")
	grantedEvent = []byte("event: " + wire.SubjectApprovalGranted)
)

// read records when client c reads each approval's event. It takes the
// pendingId from the envelope's leading "id" field without decoding the
// rest: 200 clients decoding every event in full would measure JSON, not
// the fan-out.
func (f *fanout) read(c int, resp *http.Response) {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	granted := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, sseEventLine):
			granted = bytes.Equal(line, grantedEvent)
		case granted && bytes.HasPrefix(line, sseDataLine):
			at := time.Since(f.base)
			i, ok := f.index[envelopePendingID(line[len(sseDataLine):])]
			if !ok {
				continue
			}
			f.arrived[i*sseClients+c] = at
			if f.remaining[i].Add(-1) == 0 {
				f.done <- i
			}
		}
	}
}

// envelopePendingID reads the pendingId out of an event envelope, whose id
// is "<pendingId>:<revision>".
func envelopePendingID(data []byte) string {
	var id string
	if rest, ok := bytes.CutPrefix(data, []byte(`{"id":"`)); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 {
			id = string(rest[:end])
		}
	} else {
		var ev struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(data, &ev) != nil {
			return ""
		}
		id = ev.ID
	}
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		return id[:i]
	}
	return id
}

// waitRelayed waits until TOOL_EVENTS holds n events.
func waitRelayed(b *testing.B, js jetstream.JetStream, n uint64) {
	b.Helper()
	ctx := context.Background()
	bustest.Eventually(b, 60*time.Second, 10*time.Millisecond, fmt.Sprintf("the relay published the setup's %d events", n), func() (bool, any) {
		st, err := js.Stream(ctx, wire.EventsStream)
		if err != nil {
			return false, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.State.Msgs >= n, info.State.Msgs
	})
}

// casRoundTrips is the baseline: one kv.Update at the revision last
// written, of an entry-sized value, waiting for each before the next. The
// bucket is its own, provisioned as tool_calls is, so the relay (which
// reads tool_calls) publishes nothing for these writes.
type casRoundTrips struct {
	kv    jetstream.KeyValue
	value []byte
	rev   uint64
}

func newCASRoundTrips(b *testing.B, env *bustest.Env, entryKey string) *casRoundTrips {
	b.Helper()
	ctx := context.Background()
	kv, err := env.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_cas", History: 64, Storage: jetstream.FileStorage, Replicas: 1})
	require.NoError(b, err)
	// The value is a real entry's JSON: about the bytes a transition writes.
	kve, err := env.KV.Get(ctx, entryKey)
	require.NoError(b, err)
	rev, err := kv.Create(ctx, "conv-000.cas", kve.Value())
	require.NoError(b, err)
	return &casRoundTrips{kv: kv, value: kve.Value(), rev: rev}
}

// run makes n round trips and returns how long each took.
func (c *casRoundTrips) run(b *testing.B, n int) []time.Duration {
	b.Helper()
	ctx := context.Background()
	times := make([]time.Duration, n)
	for i := range times {
		start := time.Now()
		rev, err := c.kv.Update(ctx, "conv-000.cas", c.value, c.rev)
		times[i] = time.Since(start)
		require.NoError(b, err)
		c.rev = rev
	}
	return times
}

// percentile is the nearest-rank q-th percentile of ds (which it sorts).
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1)+0.5)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package faultsuite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// adminView is the test's connection with toolgate's own credential
// through one member of the cluster (JetStream is in toolgate's account).
type adminView struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// newClusterAgent connects an agent, with the agent role's credential,
// through member a (mod the cluster's size) first.
func newClusterAgent(t *testing.T, c *natsCluster, a int) *client.Client {
	t.Helper()
	nc, _ := c.connectTo(t, server.CredsPath(c.auth, "agent"), c.servers[a%len(c.servers)])
	cl, err := client.New(nc)
	require.NoError(t, err)
	return cl
}

// kvLeader waits until the calls' stream has a leader and returns its
// server's name.
func kvLeader(t *testing.T, views map[string]*adminView) string {
	t.Helper()
	var leader string
	waitFor(t, 60*time.Second, func() (bool, string) {
		var saw []string
		for name, v := range views {
			if !v.nc.IsConnected() {
				continue
			}
			info, err := streamInfo(v.js, "KV_"+wire.CallsBucket, time.Second)
			switch {
			case err != nil:
				saw = append(saw, fmt.Sprintf("through %s: %v", name, err))
			case info.Cluster == nil || info.Cluster.Leader == "":
				saw = append(saw, fmt.Sprintf("through %s: no leader", name))
			default:
				leader = info.Cluster.Leader
				return true, ""
			}
		}
		return false, fmt.Sprint(saw)
	}, "the calls' stream has no leader")
	return leader
}

// leaderKill is what killing the calls' stream leader cost.
type leaderKill struct {
	killed, newLeader string
	// election is from the kill until the stream answers with a new
	// leader; outage from the kill until the first submit succeeds.
	election, outage time.Duration
	probes           int
}

// killLeader SIGKILLs the nats-server leading the calls' stream and
// measures the election (until a survivor answers with another leader)
// and the write outage (probeWrites).
func killLeader(t *testing.T, c *natsCluster, views map[string]*adminView, probes *probeLog, mark func(string, ...any)) leaderKill {
	t.Helper()
	k := leaderKill{killed: kvLeader(t, views)}
	victim := c.server(k.killed)
	// A fresh connection through a survivor to watch the election: the
	// test's older ones have gathered on whichever members outlived
	// earlier kills.
	var watch jetstream.JetStream
	for _, s := range c.servers {
		if s != victim && watch == nil {
			_, watch = c.connectTo(t, "", s)
		}
	}
	p := newProber(t, c, probes, "leader-"+k.killed)

	victim.kill()
	killed := time.Now()
	mark("SIGKILLed nats-server %s, leader of %s", k.killed, "KV_"+wire.CallsBucket)
	p.start(killed)

	var last string
	waitFor(t, 60*time.Second, func() (bool, string) {
		info, err := streamInfo(watch, "KV_"+wire.CallsBucket, 500*time.Millisecond)
		switch {
		case err != nil:
			last = err.Error()
		case info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == k.killed:
			last = fmt.Sprintf("leader %q", info.Cluster.Leader)
		default:
			k.newLeader = info.Cluster.Leader
			k.election = time.Since(killed)
			mark("%s elected leader of %s", k.newLeader, "KV_"+wire.CallsBucket)
			return true, ""
		}
		return false, last
	}, "no new leader of %s after killing %s", "KV_"+wire.CallsBucket, k.killed)

	k.outage, k.probes = p.wait(fmt.Sprintf("killing %s (the election took %s)", k.killed, k.election))
	return k
}

// probeLog collects the probe calls, to be counted with the rest.
type probeLog struct {
	mu    *sync.Mutex // the test's, guarding every faultCall
	calls []*faultCall
}

// prober measures a write outage: from the moment it starts, a probe
// submit (a call the policy denies: one write, nothing to run) goes out
// every 100ms through each member of the cluster in turn, each through a
// connection of its own made beforehand (the one through a dead member
// reconnects elsewhere, as an agent's would), until one succeeds. The
// outage ends when the first does.
type prober struct {
	t       *testing.T
	log     *probeLog
	tag     string
	members []*client.Client

	from     time.Time
	first    chan struct{}
	mu       sync.Mutex
	firstAt  time.Time
	sent     int
	inFlight sync.WaitGroup
	launched chan struct{}
	stop     context.CancelFunc
}

func newProber(t *testing.T, c *natsCluster, log *probeLog, tag string) *prober {
	t.Helper()
	p := &prober{t: t, log: log, tag: tag, first: make(chan struct{}), launched: make(chan struct{})}
	for _, s := range c.servers {
		nc, _ := c.connectTo(t, server.CredsPath(c.auth, "agent"), s)
		cl, err := client.New(nc)
		require.NoError(t, err)
		p.members = append(p.members, cl)
	}
	return p
}

// start sends probes from now, the outage counted from from.
func (p *prober) start(from time.Time) {
	p.from = from
	ctx, stop := context.WithCancel(p.t.Context())
	p.stop = stop
	go func() {
		defer close(p.launched)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			p.launch(n, p.members[n%len(p.members)])
			select {
			case <-p.first:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (p *prober) launch(n int, via *client.Client) {
	fc := &faultCall{kind: "probe", toolCallID: fmt.Sprintf("probe-%s-%d-%d", p.tag, p.from.UnixMilli(), n)}
	p.log.mu.Lock()
	p.log.calls = append(p.log.calls, fc)
	p.log.mu.Unlock()
	p.mu.Lock()
	p.sent++
	p.mu.Unlock()
	p.inFlight.Go(func() {
		// Each probe waits for its answer long past the outage: one
		// acknowledged late is still a call to account for.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.t.Context()), time.Minute)
		defer cancel()
		e, err := via.Submit(ctx, machine.Call{ToolCallID: fc.toolCallID, ToolName: "probe", CallerBotID: "agent", ConversationID: "faults"})
		done := time.Now()
		p.log.mu.Lock()
		fc.submitErr = err
		if err == nil {
			fc.pendingID = e.PendingID
		}
		p.log.mu.Unlock()
		if err != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.firstAt.IsZero() {
			close(p.first)
		}
		if p.firstAt.IsZero() || done.Before(p.firstAt) {
			p.firstAt = done
		}
	})
}

// wait waits for the first successful probe (60s at most, failing the
// test after) and for every probe sent, and returns the outage and how
// many probes went out.
func (p *prober) wait(after string) (time.Duration, int) {
	p.t.Helper()
	select {
	case <-p.launched:
	case <-time.After(60 * time.Second):
		p.stop()
		<-p.launched
	}
	p.stop()
	p.inFlight.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstAt.IsZero() {
		var errs []error
		p.log.mu.Lock()
		for _, fc := range p.log.calls {
			if fc.submitErr != nil && len(errs) < 5 {
				errs = append(errs, fc.submitErr)
			}
		}
		p.log.mu.Unlock()
		p.t.Fatalf("no submit succeeded within 60s of %s; %d probes sent: %v", after, p.sent, errs)
	}
	return p.firstAt.Sub(p.from), p.sent
}

// unsettledCalls lists the entries in the bucket that are not in a final
// state.
func unsettledCalls(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	var out []string
	for u := range w.Updates() {
		if u == nil {
			return out // the initial values are all in
		}
		e := decode[machine.Entry](t, u.Value())
		if !e.Status.Terminal() {
			out = append(out, fmt.Sprintf("%s %s", e.PendingID, e.Status))
		}
	}
	t.Fatalf("the watch on %s ended before its initial values", wire.CallsBucket)
	return nil
}

// poll checks cond every 20ms until it holds or d has passed, and says
// whether it held.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

package bustest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/wire"
)

// Topology is a kind of deployment a test runs against.
type Topology struct {
	Name     string
	Replicas int
}

// Topologies are the deployments the core suite must pass on.
var Topologies = []Topology{{"single", 1}, {"cluster", 3}}

// Env is a running deployment with one client connection.
type Env struct {
	Servers []*natsserver.Server
	URLs    string // comma-separated client URLs
	NC      *nats.Conn
	Conn    *bus.Conn // NC and JS, as the packages above bus hold them
	JS      jetstream.JetStream
	KV      jetstream.KeyValue // the entries' bucket
	Buckets *bus.Buckets
	Store   *bus.KVStore
}

// Start starts topo, connects, provisions, and stops it all at cleanup.
func Start(t testing.TB, topo Topology) *Env {
	t.Helper()
	var servers []*natsserver.Server
	if topo.Replicas > 1 {
		servers = Cluster(t, topo.Replicas)
	} else {
		servers = []*natsserver.Server{Server(t)}
	}
	env := &Env{Servers: servers, URLs: ClientURLs(servers)}
	env.NC, env.JS = Connect(t, env.URLs)
	env.Conn = bus.NewConn(env.JS)
	// A deadline for a hung server, not a measure of speed: on a loaded
	// machine a race-built 3-node cluster takes tens of seconds to place
	// every replicated stream.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := provision(ctx, env.JS, topo.Replicas)
	require.NoError(t, err)
	env.Buckets, env.KV = b, b.Calls
	env.Store = bus.NewKVStore(env.JS, b.Calls)
	return env
}

// provision is bus.Provision, again while a cluster's meta leader does not
// see every server it just saw (a leader elected anew after
// WaitMetaLeader, or one whose view of a peer lapsed): JetStream then
// refuses to place a replicated stream, with "no suitable peers for
// placement", until it hears from them again.
func provision(ctx context.Context, js jetstream.JetStream, replicas int) (*bus.Buckets, error) {
	for {
		b, err := bus.Provision(ctx, js, bus.Topology{Replicas: replicas})
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.ErrorCode(10005) {
			return b, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Server starts one JetStream server on a free port.
func Server(t testing.TB) *natsserver.Server {
	t.Helper()
	s, err := embedded.StartServer(embedded.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s
}

// Cluster starts n JetStream servers routed to each other and waits for the
// JetStream meta leader: before there is one, creating a stream or bucket
// blocks until its deadline.
func Cluster(t testing.TB, n int) []*natsserver.Server {
	t.Helper()
	return ClusterConfigured(t, n, nil)
}

// ClusterConfigured is Cluster, with configure (if not nil) changing
// each server's options last, as embedded.ServerConfig.Configure does.
func ClusterConfigured(t testing.TB, n int, configure func(*natsserver.Options) error) []*natsserver.Server {
	t.Helper()
	routePorts := make([]int, n)
	routes := make([]string, n)
	for i := range routePorts {
		routePorts[i] = FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[i])
	}
	name := fmt.Sprintf("tg-%s", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	servers := make([]*natsserver.Server, n)
	for i := range servers {
		s, err := embedded.StartServer(embedded.ServerConfig{
			Name:      fmt.Sprintf("%s-%d", name, i),
			Host:      "127.0.0.1",
			Port:      -1,
			StoreDir:  filepath.Join(t.TempDir(), fmt.Sprint(i)),
			Cluster:   &embedded.ClusterConfig{Name: name, Host: "127.0.0.1", Port: routePorts[i], Routes: routes},
			Configure: configure,
		})
		require.NoError(t, err)
		t.Cleanup(s.Shutdown)
		servers[i] = s
	}
	WaitMetaLeader(t, servers)
	return servers
}

// WaitMetaLeader waits until one of servers leads JetStream's meta group
// and has heard from every peer: a leader that has not yet seen them all
// fails to place a replicated stream ("no suitable peers for placement").
func WaitMetaLeader(t testing.TB, servers []*natsserver.Server) {
	t.Helper()
	Eventually(t, 30*time.Second, 20*time.Millisecond, "a JetStream meta leader with every peer", func() (bool, any) {
		var peers []int
		for _, s := range servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(servers) {
				return true, nil
			}
			peers = append(peers, len(s.JetStreamClusterPeers()))
		}
		return false, fmt.Sprintf("no leader seeing all %d; peers seen by each: %v", len(servers), peers)
	})
}

// ClientURLs joins the servers' client URLs.
func ClientURLs(servers []*natsserver.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Connect connects to urls and closes the connection at cleanup.
func Connect(t testing.TB, urls string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := bus.Connect(bus.ConnConfig{URLs: urls, Name: t.Name()}, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// RunRelay runs a relay until the test ends, and fails the test if it
// stops with an error. Its ack wait is short, so a revision redelivered in
// a test does not wait long.
func RunRelay(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.NewRelay(js, relay.RelayConfig{AckWait: time.Second}, Logger()).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// RunEventsFeed runs a feed of TOOL_EVENTS, as a process with the http
// role does, until the test ends.
func RunEventsFeed(t testing.TB, js jetstream.JetStream) *views.EventsFeed {
	t.Helper()
	f := views.NewEventsFeed(js)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, Logger()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("events feed: %v", err)
		}
	})
	return f
}

// Relayed reports whether the relay has published an event for every
// revision written so far: its consumer has acknowledged every message
// of the bucket's stream up to the last one written before the call (its
// "nothing pending" alone was seen to lag the stream by a dozen
// revisions). Counting events after that, rather than as soon as enough
// are in, is what lets a test see a duplicate.
func Relayed(ctx context.Context, js jetstream.JetStream) bool {
	s, err := js.Stream(ctx, "KV_"+wire.CallsBucket)
	if err != nil {
		return false
	}
	last := s.CachedInfo().State.LastSeq
	c, err := s.Consumer(ctx, relay.RelayDurable)
	if err != nil {
		return false
	}
	info := c.CachedInfo()
	if info.NumAckPending > 0 {
		return false
	}
	if info.AckFloor.Stream >= last {
		return true
	}
	// The last message may be gone (a purge marker that expired): then
	// nothing is left to relay once nothing is pending.
	_, err = s.GetMsg(ctx, last)
	return info.NumPending == 0 && errors.Is(err, jetstream.ErrMsgNotFound)
}

// WaitRelayed waits until Relayed, and returns the events stream's last
// sequence then: every event of what was written so far is at or below it.
func WaitRelayed(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	Eventually(t, 60*time.Second, 10*time.Millisecond, "the relay caught up", func() (bool, any) { ok := Relayed(t.Context(), js); return ok, "the relay behind the bucket" })
	s, err := js.Stream(t.Context(), wire.EventsStream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return info.State.LastSeq
}

// BenchParallelism is the benchmarks' RunParallel goroutines per
// GOMAXPROCS. A gateway serves many agents at once; with one goroutine per
// core a benchmark would measure round-trip latency, not how many writes
// the server absorbs.
const BenchParallelism = 4

// CPUTime is the CPU time, user and system, this process (the NATS
// servers in it too) has used: what benchmarks report per operation.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Eventually checks cond every tick until it holds, for at most wait,
// and then fails t with what was awaited and what cond saw last.
// (testify's Eventually formats its message before it waits, so a
// failed wait would print what it saw at the start.)
func Eventually(t testing.TB, wait, tick time.Duration, what string, cond func() (ok bool, saw any)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last saw %v", what, wait, saw)
		}
		time.Sleep(tick)
	}
}

// Logger discards logs, or writes them to stderr with -v. (Not t.Log: the
// goroutines a test starts may still log after it has ended.)
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on, for a
// server a test starts (and may restart) on a port it must name first. It
// is drawn at random from below the kernel's ephemeral range: a port from
// that range (what listening on port 0 hands out) may be taken, before the
// server binds it, by the local end of any connection on the machine, and
// with a suite's packages running side by side one was ("bind: address
// already in use"). No port is returned twice in one test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	ports.Lock()
	defer ports.Unlock()
	for range 1000 {
		p := minPort + rand.IntN(lo-minPort)
		if ports.given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		ports.given[p] = true
		return p
	}
	t.Fatalf("no free port in [%d, %d)", minPort, lo)
	return 0
}

// minPort is the lowest port FreePort hands out: below it are the ports
// of well-known services.
const minPort = 10000

var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux:
// /proc/sys/net/ipv4/ip_local_port_range), 32768 where it cannot be read
// or leaves too little below it.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > minPort+1000 {
				return lo
			}
		}
	}
	return 32768
}

// StreamLeader returns the index in servers of the one leading stream (in
// the default account), or -1 while none does.
func StreamLeader(servers []*natsserver.Server, stream string) int {
	for i, s := range servers {
		if s.Running() && s.JetStreamIsStreamLeader(natsserver.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// MoveStreamLeader makes servers[to] the leader of stream, asking the
// leader there is to step down in its favour, and waits until it leads.
func MoveStreamLeader(t testing.TB, nc *nats.Conn, servers []*natsserver.Server, stream string, to int) {
	t.Helper()
	body := fmt.Sprintf(`{"placement":{"preferred":%q}}`, servers[to].Name())
	last := "no leader yet"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		switch StreamLeader(servers, stream) {
		case to:
			return
		case -1:
			continue
		}
		msg, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(body), 2*time.Second)
		if err != nil {
			last = err.Error()
		} else {
			last = string(msg.Data)
		}
	}
	t.Fatalf("%s: leadership never moved to %s; the last step-down answered %s", stream, servers[to].Name(), last)
}

// Package server is toolgate's server side as one process runs it: Config
// is everything `toolgate serve` can be told, Main runs the roles it names
// over an embedded or external NATS. cmd/toolgate parses flags into a
// Config; toolgatetest starts Main for end-to-end tests.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/metrics/exporter"
	"github.com/toolgate/toolgate/internal/natsapi"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Config is everything `toolgate serve` can be told. Its zero value is
// not runnable: cmd/toolgate fills it from flags with their defaults.
type Config struct {
	Data         string         // embedded server's storage
	Listen       string         // embedded server's client address
	Conn         bus.ConnConfig // external servers (Conn.URLs) and credentials
	Replicas     int
	EventsMaxAge time.Duration
	RelayAckWait time.Duration
	LogLevel     slog.Level    // for the logger cmd/toolgate builds; Main logs to Main.Log
	Roles        Roles         // which roles this process runs
	PolicyFile   string        // loaded into the policies bucket at start
	HTTP         string        // the http role's address
	AllowedHosts Hosts         // Host headers the HTTP API answers (empty: api.DefaultAllowedHosts)
	TokensFile   string        // bearer tokens for the HTTP API
	TokensData   string        // the same, inline
	Tools        []string      // built-in tools the executor role hosts
	Lease        time.Duration // the executor role's lease on a running call
	Metrics      string        // a listener serving only /metrics, for processes without the http role
	// OIDC is single sign-on at an OpenID provider for the HTTP API and
	// the inbox (docs/approvers.md), beside the tokens.
	OIDC httpapi.OIDC
	// Retention is how long a finished call stays in tool_calls before
	// the timer role moves it to the archive (0: it stays).
	Retention time.Duration
	// ArchiveMaxAge is how long the archive keeps a retired call (0: for
	// ever).
	ArchiveMaxAge time.Duration
	// OutageLimit is how long the process goes on reconnecting to NATS
	// before it exits for its supervisor to restart it (0: for ever). A
	// connection NATS closes for good ends the process at once.
	OutageLimit time.Duration
	// Sync is when the embedded server's JetStream writes reach the disk:
	// SyncInterval (or "": on an interval, 2 minutes) or SyncAlways
	// (before each write is acknowledged). Servers toolgate does not
	// start set it themselves (sync_interval in their jetstream block).
	Sync string
}

// When the embedded server syncs its writes to disk (Config.Sync).
const (
	SyncInterval = "interval"
	SyncAlways   = "always"
)

// DefaultConfig is `toolgate serve` without flags: an embedded server on
// 127.0.0.1:4222 storing in ./toolgate-data, every role, the HTTP API on
// 127.0.0.1:8080.
func DefaultConfig() Config {
	return Config{
		Data:         "./toolgate-data",
		Listen:       "127.0.0.1:4222",
		Replicas:     1,
		EventsMaxAge: bus.DefaultEventsMaxAge,
		RelayAckWait: 10 * time.Second,
		LogLevel:     slog.LevelInfo,
		Roles:        Roles{"all"},
		HTTP:         "127.0.0.1:8080",
		Lease:        30 * time.Second,
		Retention:    DefaultRetention,
		OutageLimit:  DefaultOutageLimit,
		Sync:         SyncInterval,
	}
}

// DefaultOutageLimit is how long serve reconnects to NATS before it exits.
const DefaultOutageLimit = 30 * time.Second

// DefaultRetention is how long a finished call stays in tool_calls by
// default: a day, then it is read from the archive.
const DefaultRetention = 24 * time.Hour

// Validate names the flag of the first bad setting in c.
func (c Config) Validate() error {
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("--replicas: must be 1 to 5, got %d", c.Replicas)
	}
	if c.Conn.URLs == "" {
		if c.Conn.User != "" || c.Conn.Password != "" || c.Conn.Token != "" || c.Conn.CredsFile != "" {
			return fmt.Errorf("--nats-user, --nats-password, --nats-token and --nats-creds are for servers given with --nats: the embedded server takes only credentials toolgate issued (see docs/security.md)")
		}
		if c.Conn.TLSCA != "" || c.Conn.TLSCert != "" || c.Conn.TLSKey != "" {
			return fmt.Errorf("--nats-tls-ca, --nats-tls-cert and --nats-tls-key are for servers given with --nats; the embedded server serves no TLS")
		}
		if _, _, err := splitHostPort(c.Listen); err != nil {
			return fmt.Errorf("--listen %q: %v", c.Listen, err)
		}
		if c.Replicas > 1 {
			return fmt.Errorf("--replicas %d needs a cluster: give its servers with --nats", c.Replicas)
		}
	}
	if err := c.Roles.Validate(); err != nil {
		return fmt.Errorf("--roles: %v", err)
	}
	for _, r := range c.Roles.rows() {
		if r.check == nil {
			continue
		}
		if err := r.check(c); err != nil {
			return err
		}
	}
	if c.Metrics != "" {
		if _, _, err := splitHostPort(c.Metrics); err != nil {
			return fmt.Errorf("--metrics %q: %v", c.Metrics, err)
		}
	}
	if c.EventsMaxAge < 0 {
		return fmt.Errorf("--events-max-age: must be >= 0, got %s", c.EventsMaxAge)
	}
	if c.Retention < 0 {
		return fmt.Errorf("--retention: must be >= 0 (0: finished calls stay), got %s", c.Retention)
	}
	if c.OutageLimit < 0 {
		return fmt.Errorf("--nats-outage-limit: must be >= 0 (0: reconnect for ever), got %s", c.OutageLimit)
	}
	switch {
	case c.Sync != "" && c.Sync != SyncInterval && c.Sync != SyncAlways:
		return fmt.Errorf("--sync: %s or %s, got %q", SyncInterval, SyncAlways, c.Sync)
	case c.Sync == SyncAlways && c.Conn.URLs != "":
		return fmt.Errorf("--sync: applies to the embedded server; with --nats, set sync_interval: always in the jetstream block of each nats-server's config")
	}
	if c.ArchiveMaxAge < 0 {
		return fmt.Errorf("--archive-max-age: must be >= 0 (0: for ever), got %s", c.ArchiveMaxAge)
	}
	for name, d := range map[string]time.Duration{"--relay-ack-wait": c.RelayAckWait, "--executor-lease": c.Lease} {
		if d <= 0 {
			return fmt.Errorf("%s: must be > 0, got %s", name, d)
		}
	}
	for _, t := range c.Tools {
		if _, ok := builtinTools[t]; !ok {
			return fmt.Errorf("--tools: unknown tool %q: want http or exec", t)
		}
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("port must be a number from 0 to 65535, got %q", p)
	}
	return host, port, nil
}

// Main is a running toolgate: the bus connection and every role this
// process runs. End-to-end tests start it in-process (see toolgatetest).
type Main struct {
	Config Config
	// Log is where Main and its roles log (default: nowhere).
	Log *slog.Logger
	// Version is what the request API reports as its service's version.
	Version string
	// Clock, when set, replaces time.Now in the application layer, the
	// policy engine and the timer, for tests that script when calls
	// happen and when their deadlines pass. When nil, they tell the time
	// by the NATS server's clock (stores.ServerClock): LocalClock corrected
	// by its offset to the server's, measured at start and every minute,
	// so that processes whose machines' clocks disagree agree on when a
	// deadline passes and a lease runs out.
	Clock func() time.Time
	// LocalClock is the machine's own clock (nil: time.Now), which the
	// server's corrects; tests set it off to check that it does.
	LocalClock func() time.Time

	once  sync.Once
	ready chan struct{}
	// Set before ready is closed, read only after.
	natsURL  string
	httpAddr string
	gate     *gate.Service
	handler  http.Handler
	// server is the embedded NATS server, when there is one.
	server *natsserver.Server
	// keys are the trust chain's, when this process holds them: it
	// issues credentials, and the embedded server's revocations follow
	// the identities bucket.
	keys *auth.Keys
}

func (m *Main) init() {
	m.once.Do(func() { m.ready = make(chan struct{}) })
}

// Ready is closed once the bus is provisioned, the roles are starting, the
// HTTP API listens and, with the intake role, the request API answers. It
// is never closed if Run fails before then.
func (m *Main) Ready() <-chan struct{} {
	m.init()
	return m.ready
}

// NATSURL is the URL of the NATS server Main uses: the embedded server's,
// or the first of Config.Conn.URLs. Valid once Ready is closed.
func (m *Main) NATSURL() string { return m.natsURL }

// HTTPAddr is the address the http role listens on (HOST:PORT), empty
// without the role. Valid once Ready is closed.
func (m *Main) HTTPAddr() string { return m.httpAddr }

// HTTPHandler is the HTTP API the http role serves, nil without the role,
// for a test to serve it behind a server of its own (to simulate an
// outage, say). Valid once Ready is closed.
func (m *Main) HTTPHandler() http.Handler { return m.handler }

// Gate is the application layer Main's roles share, for a test to act as
// toolgate itself would. Valid once Ready is closed.
func (m *Main) Gate() *gate.Service { return m.gate }

// ServerMessages is how many messages the embedded NATS server has taken
// in and sent out so far, over every connection, and false when Main
// connects to a server it does not run. The bench counts a lifecycle's
// messages with it. Valid once Ready is closed.
func (m *Main) ServerMessages() (in, out int64, ok bool) {
	if m.server == nil {
		return 0, 0, false
	}
	v, err := m.server.Varz(nil)
	if err != nil {
		return 0, 0, false
	}
	return v.InMsgs, v.OutMsgs, true
}

// Run starts everything and blocks until ctx ends, then stops cleanly:
// roles first, then the connection (drained), then the embedded server.
func (m *Main) Run(ctx context.Context) error {
	m.init()
	if m.Log == nil {
		m.Log = slog.New(slog.DiscardHandler)
	}
	if err := m.Config.Validate(); err != nil {
		return err
	}
	nc, err := m.connect()
	if err != nil {
		return err
	}
	defer m.disconnect(nc)
	js, buckets, err := m.provision(ctx, nc)
	if err != nil {
		return err
	}
	d, err := m.deps(ctx, nc, js, buckets)
	if err != nil {
		return err
	}
	if err := m.listen(d); err != nil {
		return err
	}
	// A step that fails after the first goroutine started stops them
	// all, and waits for them, before Run returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	failed := func(err error) error {
		cancel()
		_ = g.Wait()
		return err
	}
	g.Go(func() error { return m.watchConn(ctx, nc) })
	if d.serverClock != nil {
		g.Go(func() error { return d.serverClock.Run(ctx, time.Minute, m.Log) })
	}
	if !m.startCredentials(ctx, g, d) {
		return g.Wait()
	}
	if m.Config.Metrics != "" {
		g.Go(func() error { return serveMetrics(ctx, m.Config.Metrics, d.registry, m.Log) })
	}
	if err := m.prepareViews(d); err != nil {
		return failed(err)
	}
	m.startFeeds(ctx, g, d)
	m.startRoles(ctx, g, d)
	if err := m.waitReady(ctx, d); err != nil {
		return errors.Join(err, g.Wait())
	}
	m.Log.Info("toolgate serving", "nats", nc.ConnectedUrlRedacted(), "replicas", m.Config.Replicas, "roles", strings.Join(d.roles.names(), ","))
	close(m.ready)
	return g.Wait()
}

// disconnect drains nc, then stops the embedded server, if there is one.
func (m *Main) disconnect(nc *nats.Conn) {
	if err := nc.Drain(); err != nil {
		m.Log.Warn("drain", "err", err)
	}
	if m.server != nil {
		m.server.Shutdown()
		m.server.WaitForShutdown()
	}
	m.Log.Info("toolgate stopped")
}

// listen runs the roles' listen (the http role's listener), and keeps
// what Main reports of them.
func (m *Main) listen(d *deps) error {
	for _, r := range d.roles {
		if r.listen == nil {
			continue
		}
		if err := r.listen(d, m.Log); err != nil {
			return err
		}
	}
	if d.httpListener != nil {
		m.httpAddr, m.handler = d.httpListener.Addr().String(), d.httpHandler
	}
	return nil
}

// startCredentials lists the role credentials among the identities, when
// this process holds the keys, and has the embedded server, when there is
// one, follow the identities bucket's revocations. It returns once the
// revocations are applied, true, or ctx ended first, false.
func (m *Main) startCredentials(ctx context.Context, g *errgroup.Group, d *deps) bool {
	if m.keys != nil {
		// The process holding the keys (the embedded server's, or one
		// given their --data on a cluster) lists the role credentials
		// beside them, so that they can be revoked like any other.
		if err := registerLocalCreds(ctx, m.Config.Data, stores.NewIdentityStore(d.js, d.buckets.Identities)); err != nil {
			// Only listing and revoking them wait for the next start.
			m.Log.Warn("recording the role credentials among the identities failed", "err", err)
		}
	}
	if m.server == nil {
		return true
	}
	// Before serving: a revoked credential is refused from the start, and
	// nobody who is told toolgate serves meets the moment the account's
	// imports are registered again.
	applied := make(chan struct{})
	g.Go(func() error { return m.enforceRevocations(ctx, m.keys, d.js, d.buckets.Identities, applied) })
	select {
	case <-applied:
		return true
	case <-ctx.Done():
		return false
	}
}

// prepareViews runs the roles' prepare, then has the views of tool_calls
// they keep join the feed, each once, in callsView's order: the timer's
// deadlines, the first thing a restart must know, are told first that the
// bucket is read.
func (m *Main) prepareViews(d *deps) error {
	for _, r := range d.roles {
		if r.prepare == nil {
			continue
		}
		if err := r.prepare(d, m.Log.With("role", r.name)); err != nil {
			return fmt.Errorf("role %s: %w", r.name, err)
		}
	}
	for v := range callsViews {
		if !d.roles.needsView(v) {
			continue
		}
		if err := v.join(d, m.Log); err != nil {
			return err
		}
	}
	return nil
}

// startFeeds starts what the roles read together: the policy in force;
// the grants, the archive's calls and the shadow policy for the roles
// that submit calls; the one watch of
// tool_calls that feeds every view of it, and the one reader of
// TOOL_EVENTS.
func (m *Main) startFeeds(ctx context.Context, g *errgroup.Group, d *deps) {
	// Every role that reads the policy engine (submits, the hooks, the
	// relay's masks, the notifier's channels, the reviewers, the timer's
	// approvals at a deadline) sees the policy in force: a change reaches
	// every process at once, whatever roles it runs.
	g.Go(func() error { return d.policies.Follow(ctx, d.engine, m.Log) })
	if d.roles.needsEvaluation() {
		// Calls submitted here are matched against grants in memory.
		g.Go(func() error { return d.grants.Follow(ctx, m.Log) })
		// And the archive is asked whether a call was retired only when
		// it may hold it: follow which calls it holds.
		g.Go(func() error { return d.gate.Runtime().FollowArchive(ctx, m.Log) })
		// And each is compared against the shadow policy, when one is set.
		g.Go(func() error { return d.gate.Runtime().FollowShadow(ctx, m.Log) })
	}
	// The views of tool_calls the roles keep in memory are all in: one
	// watch of the bucket feeds them.
	g.Go(func() error { return d.feed.Run(ctx, m.Log) })
	g.Go(func() error {
		// The first read of a large bucket is the heap's peak (at 100k
		// open calls, about twice what the views then keep): give what
		// it left behind back to the system now, not over minutes. A
		// small one leaves little, and the collection this forces costs
		// more than it gives back.
		select {
		case <-d.feed.Loaded():
			if st, err := d.buckets.Calls.Status(ctx); err == nil && st.Values() >= largeBucket {
				debug.FreeOSMemory()
			}
		case <-ctx.Done():
		}
		return nil
	})
	if d.roles.needsEvents() {
		// Event streams and the metrics exporter: one reader of
		// TOOL_EVENTS for them all.
		g.Go(func() error { return d.events.Run(ctx, m.Log) })
	}
}

// startRoles runs each role on g: a role's error stops the process, but
// an error while shutting down is the shutdown, not a failure.
func (m *Main) startRoles(ctx context.Context, g *errgroup.Group, d *deps) {
	for _, r := range d.roles {
		log := m.Log.With("role", r.name)
		g.Go(func() error {
			if err := r.run(ctx, d, log); err != nil && ctx.Err() == nil {
				return fmt.Errorf("role %s: %w", r.name, err)
			}
			return nil
		})
	}
}

// waitReady returns once the process serves: with a role serving the
// request API, once the API answers, so that nobody who waits for the log
// line gets "no responders".
func (m *Main) waitReady(ctx context.Context, d *deps) error {
	if !d.roles.needsRequestAPI() {
		return nil
	}
	return natsapi.WaitReady(ctx, d.nc)
}

// watchConn ends the process when its NATS connection is gone: closed
// for good (NATS drops a client that breaks its protocol, and nats.go then
// stops reconnecting), or reconnecting for longer than the outage limit.
// Every role shares the connection: a process without it serves nothing
// but errors, and a supervisor restarting it does better than waiting.
func (m *Main) watchConn(ctx context.Context, nc *nats.Conn) error {
	changed := nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer nc.RemoveStatusListener(changed)
	var deadline <-chan time.Time
	var since time.Time
	check := func(st nats.Status) error {
		switch st {
		case nats.CLOSED:
			return fmt.Errorf("the NATS connection was closed (%v): exiting for a supervisor to restart toolgate", nc.LastError())
		case nats.CONNECTED:
			if deadline != nil {
				m.Log.Info("NATS connection back", "after", time.Since(since).Round(time.Millisecond), "nats", nc.ConnectedUrlRedacted())
			}
			deadline = nil
		default:
			if deadline == nil && m.Config.OutageLimit > 0 {
				since = time.Now()
				deadline = time.After(m.Config.OutageLimit)
				m.Log.Warn("NATS connection lost: reconnecting", "exit-after", m.Config.OutageLimit, "err", nc.LastError())
			}
		}
		return nil
	}
	// A status before the listener was added is not sent again: start
	// from the connection's own.
	if err := check(nc.Status()); err != nil {
		return err
	}
	for {
		select {
		case st := <-changed:
			if err := check(st); err != nil {
				return err
			}
		case <-deadline:
			return fmt.Errorf("no NATS connection for %s (%v): exiting for a supervisor to restart toolgate (--nats-outage-limit)", m.Config.OutageLimit, nc.LastError())
		case <-ctx.Done():
			return nil
		}
	}
}

// asyncPublishTimeout bounds the wait for an asynchronous publish's ack:
// JetStream answers in milliseconds, or at once with "no responders"
// while a stream elects its leader; only an ack lost with a dead server
// takes longer.
const asyncPublishTimeout = 5 * time.Second

// serveMetrics serves the process's registry at addr/metrics until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("metrics", "url", "http://"+l.Addr().String()+"/metrics")
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// deps is what the roles share: one connection, one application layer.
type deps struct {
	cfg      Config
	roles    running // the roles this process runs
	version  string
	nc       *nats.Conn
	js       jetstream.JetStream
	conn     *bus.Conn // nc, as gate, the workers and the metrics take it
	buckets  *bus.Buckets
	gate     *gate.Service
	engine   *policy.Engine
	policies *stores.PolicyStore
	grants   *stores.GrantStore // followed by processes that evaluate the policy
	// feed is the process's one watch of tool_calls, for the views of it
	// the roles keep (the call index, the timer's deadlines, the pending
	// gauge: callsView); Main.prepareViews adds them.
	feed *views.CallsFeed
	// events is the process's one reader of TOOL_EVENTS for the event
	// streams (http) and the metrics exporter (analytics).
	events *views.EventsFeed
	// Built as their views of tool_calls join the feed, before it starts.
	timer    *worker.Timer
	notifier *worker.Notifier // made by the notifier role's prepare
	reviewer *worker.Reviewer // made by the reviewer role's prepare
	exporter *exporter.Exporter
	// analytics reads the analytics bucket (reports; the analytics role
	// keeps it).
	analytics *analytics.Analytics
	// registry holds every Prometheus collector this process exports.
	registry *prometheus.Registry
	// clock is what the application layer, the policy engine and the
	// timer tell the time by: Main.Clock, or serverClock's.
	clock       func() time.Time
	serverClock *stores.ServerClock // nil: Main.Clock is set
	// The http role's, built before the roles start.
	httpHandler  http.Handler
	httpListener net.Listener
}

func (m *Main) deps(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, b *bus.Buckets) (*deps, error) {
	conn := bus.NewConn(js)
	policies := stores.NewPolicyStore(js, b.Policies)
	if m.Config.PolicyFile != "" {
		data, err := os.ReadFile(m.Config.PolicyFile)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		loaded, err := policies.LoadFile(ctx, data)
		if err != nil {
			return nil, fmt.Errorf("--policy %s: %w", m.Config.PolicyFile, err)
		}
		if loaded {
			m.Log.Info("policy loaded", "file", m.Config.PolicyFile)
		} else {
			m.Log.Info("policy file unchanged since it was loaded; keeping the stored policy, which may have grown", "file", m.Config.PolicyFile)
		}
	}
	doc, _, err := policies.Get(ctx)
	if err != nil {
		return nil, err
	}
	grants := stores.NewGrantStore(js, b.Grants)
	ledger := stores.NewBudgetLedger(js, b.Budgets)
	clock, sc := m.Clock, (*stores.ServerClock)(nil)
	if clock == nil {
		sc = stores.NewServerClock(b.Calls, m.LocalClock)
		if err := sc.Sync(ctx, m.Log); err != nil {
			m.Log.Warn("telling the time by this machine's clock until the NATS server's can be read", "err", err)
		}
		clock = sc.Now
	}
	opts := []policy.EngineOption{policy.WithRateCounter(stores.NewRateCounters(js, b.RateLimits)), policy.WithClock(clock)}
	opts = append(opts, policy.WithFlowMarks(stores.NewFlowMarks(js, b.Flows)))
	engine, err := policy.NewEngine(doc, grants, ledger, opts...)
	if err != nil {
		return nil, fmt.Errorf("stored policy: %w", err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.NewConsumerStalls(consumer.Stalled))
	mx, err := metrics.For(registry)
	if err != nil {
		return nil, err
	}
	var issue gate.Issuer
	if m.keys != nil {
		issue = func(name string, role wire.Role) (string, []byte, error) {
			c, err := m.keys.Issue(name, role)
			return c.Key, c.Creds, err
		}
	}
	mx.BoundLabels(engine) // tool and team labels: only names the policy has
	kp, err := receiptKey(m.Config.Data)
	if err != nil {
		return nil, err
	}
	signer, err := gate.ReceiptSigner(kp)
	if err != nil {
		return nil, fmt.Errorf("receipt key %s: %w", ReceiptKeyPath(m.Config.Data), err)
	}
	// The analytics report, for the processes that serve it: the request
	// API's analytics use case (intake) and /v1/analytics (http).
	var an *analytics.Analytics
	var report func(ctx context.Context, r wire.AnalyticsRequest) (json.RawMessage, error)
	events := views.NewEventsFeed(js)
	rows := m.Config.Roles.rows()
	if rows.needsReport() {
		if an, err = analytics.Open(ctx, conn, analytics.Config{Replicas: m.Config.Replicas, Events: events, Log: m.Log}); err != nil {
			return nil, err
		}
		report = func(ctx context.Context, r wire.AnalyticsRequest) (json.RawMessage, error) {
			opts := analytics.ReportOptions{Hours: r.Hours, Resolution: r.Resolution}
			if r.Until > 0 {
				opts.Until = time.UnixMilli(r.Until)
			}
			rep, err := an.Report(ctx, opts)
			if err != nil {
				return nil, err
			}
			return json.Marshal(rep)
		}
	}
	m.gate = gate.New(gate.Config{Conn: conn, Buckets: b, Policy: engine, Grants: grants, Metrics: mx, Issue: issue, Signer: signer, Analytics: report, Events: events, Clock: clock, Log: m.Log})
	if err := m.gate.Runtime().RegisterReceiptKey(ctx); err != nil {
		return nil, err
	}
	version := m.Version
	if version == "" {
		version = "dev"
	}
	return &deps{feed: views.NewCallsFeed(js, b.Calls), events: events, analytics: an, cfg: m.Config, roles: rows, version: version, nc: nc, js: js, conn: conn, buckets: b, gate: m.gate, engine: engine, policies: policies, grants: grants, registry: registry, clock: clock, serverClock: sc}, nil
}

// largeBucket is how many entries and revisions in tool_calls make its
// first read worth giving memory back after.
const largeBucket = 10_000

// connect starts the embedded server, or dials the configured ones.
//
// The embedded server trusts only toolgate's operator (package auth): no
// client connects without a credential toolgate issued. On first start
// serve creates the trust chain and a credential per role in the data
// directory; toolgate connects with its own.
func (m *Main) connect() (*nats.Conn, error) {
	c := m.Config.Conn
	c.Name = "toolgate"
	if c.URLs != "" {
		m.natsURL, _, _ = strings.Cut(c.URLs, ",")
		// Where the trust chain's keys are (a data directory that serve
		// or `toolgate creds init` made), this process can issue
		// credentials.
		keys, err := auth.Load(authDir(m.Config.Data))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		m.keys = keys
		nc, err := bus.Connect(c)
		if err == nil && !nc.AuthRequired() {
			m.Log.Warn("the NATS servers take clients without credentials: whoever reaches them acts as toolgate itself (see docs/security.md)", "nats", nc.ConnectedUrlRedacted())
		}
		return nc, err
	}
	keys, err := localTrust(m.Config.Data)
	if err != nil {
		return nil, err
	}
	host, port, _ := splitHostPort(m.Config.Listen)
	srv, err := embedded.StartServer(embedded.ServerConfig{
		Host: host, Port: port, StoreDir: filepath.Join(m.Config.Data, "jetstream"),
		SyncAlways: m.Config.Sync == SyncAlways,
		Configure:  func(o *natsserver.Options) error { return keys.Configure(o, nil) },
	})
	if err != nil {
		return nil, err
	}
	m.server, m.keys = srv, keys
	if err := os.WriteFile(URLPath(m.Config.Data), []byte(srv.ClientURL()+"\n"), 0o644); err != nil {
		srv.Shutdown()
		return nil, err
	}
	m.Log.Info("embedded NATS started", "listen", srv.ClientURL(), "data", m.Config.Data, "credentials", filepath.Dir(CredsPath(m.Config.Data, "x")))
	c.URLs = srv.ClientURL()
	c.CredsFile = CredsPath(m.Config.Data, auth.ServerUser)
	m.natsURL = c.URLs
	nc, err := bus.Connect(c, nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
	}
	return nc, err
}

// provision opens JetStream on nc and creates the buckets and streams,
// retrying while a cluster is still electing its JetStream leader.
func (m *Main) provision(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, *bus.Buckets, error) {
	// An asynchronous publish (the relay's events) whose
	// ack went down with the server that was to send it is otherwise
	// waited for forever, and the relay, which acks revisions in order,
	// stalls for good. Bounded, it fails, and the revision is published
	// again (the replay de-duplicated by its Nats-Msg-Id).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(asyncPublishTimeout))
	if err != nil {
		return nil, nil, err
	}
	topo := bus.Topology{Replicas: m.Config.Replicas, EventsMaxAge: m.Config.EventsMaxAge, ArchiveMaxAge: m.Config.ArchiveMaxAge}
	var b *bus.Buckets
	err = consumer.Retry(ctx, m.Log, "provisioning", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		b, err = bus.Provision(ctx, js, topo)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 408 {
			return consumer.Permanent(err) // a refusal, not a leader election: retrying won't help
		}
		return err
	})
	return js, b, err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

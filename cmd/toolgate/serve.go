package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/embedded"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Config is everything `toolgate serve` can be told.
type Config struct {
	Data         string         // embedded server's storage
	Listen       string         // embedded server's client address
	Conn         bus.ConnConfig // external servers (Conn.URLs) and credentials
	Replicas     int
	EventsMaxAge time.Duration
	RelayAckWait time.Duration
	LogLevel     slog.Level
	Roles        roleList      // which roles this process runs
	PolicyFile   string        // loaded into the policies bucket at start
	HTTP         string        // the http role's address
	TokensFile   string        // bearer tokens for the HTTP API
	TokensData   string        // the same, inline
	Tools        []string      // built-in tools the executor role hosts
	Lease        time.Duration // the executor role's lease on a running call
	Metrics      string        // a listener serving only /metrics, for processes without the http role
}

func newServeFlags(stderr io.Writer) (*flag.FlagSet, *Config) {
	cfg := new(Config)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Data, "data", "./toolgate-data", "directory the embedded NATS server stores JetStream data in")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:4222", "HOST:PORT the embedded NATS server listens on for clients")
	fs.StringVar(&cfg.Conn.URLs, "nats", "", "NATS server URLs (comma-separated) to use instead of the embedded server")
	fs.StringVar(&cfg.Conn.User, "nats-user", "", "NATS user (with --nats-password)")
	fs.StringVar(&cfg.Conn.Password, "nats-password", "", "NATS password")
	fs.StringVar(&cfg.Conn.Token, "nats-token", "", "NATS token")
	fs.StringVar(&cfg.Conn.CredsFile, "nats-creds", "", "NATS credentials file")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "replicas of the bucket and streams (3 on a cluster)")
	fs.DurationVar(&cfg.EventsMaxAge, "events-max-age", bus.DefaultEventsMaxAge, "how long TOOL_EVENTS keeps events (0: for ever)")
	fs.DurationVar(&cfg.RelayAckWait, "relay-ack-wait", 10*time.Second, "how long a revision handed to a relay that died waits before another relay takes it")
	fs.TextVar(&cfg.LogLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	cfg.Roles = roleList{"all"}
	fs.Var(&cfg.Roles, "roles", "roles this process runs: all, or a comma-separated list of "+strings.Join(knownRoles, ","))
	fs.StringVar(&cfg.PolicyFile, "policy", "", "policy document (YAML or JSON) to put in force at start")
	fs.StringVar(&cfg.HTTP, "http", "127.0.0.1:8080", "HOST:PORT of the HTTP API and web inbox (role http)")
	fs.StringVar(&cfg.TokensFile, "tokens", "", "file of HTTP bearer tokens, one per line: TOKEN USER ROLE[,ROLE…]")
	fs.StringVar(&cfg.TokensData, "tokens-data", "", "HTTP bearer tokens inline, entries separated by ';'")
	fs.StringVar(&cfg.Metrics, "metrics", "", "HOST:PORT serving only /metrics, for a process without the http role (none by default)")
	fs.DurationVar(&cfg.Lease, "executor-lease", 30*time.Second, "how long the executor role's claim on a running call lasts without a heartbeat (a dead executor's calls run again elsewhere after it)")
	fs.Func("tools", "built-in tools the executor role hosts: http, exec (comma-separated; none by default)", func(v string) error {
		cfg.Tools = nil
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t == "" {
				continue
			}
			if _, ok := builtinTools[t]; !ok {
				return fmt.Errorf("unknown tool %q: want http or exec", t)
			}
			cfg.Tools = append(cfg.Tools, t)
		}
		return nil
	})
	return fs, cfg
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs, cfg := newServeFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	return (&Main{Config: *cfg, Log: log}).Run(ctx)
}

func (c Config) validate() error {
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("--replicas: must be 1 to 5, got %d", c.Replicas)
	}
	if c.Conn.URLs == "" {
		if _, _, err := splitHostPort(c.Listen); err != nil {
			return fmt.Errorf("--listen %q: %v", c.Listen, err)
		}
		if c.Replicas > 1 {
			return fmt.Errorf("--replicas %d needs a cluster: give its servers with --nats", c.Replicas)
		}
	}
	if err := c.Roles.validate(); err != nil {
		return fmt.Errorf("--roles: %v", err)
	}
	if slices.Contains(c.Roles.resolve(), "http") {
		if _, _, err := splitHostPort(c.HTTP); err != nil {
			return fmt.Errorf("--http %q: %v", c.HTTP, err)
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
	for name, d := range map[string]time.Duration{"--relay-ack-wait": c.RelayAckWait, "--executor-lease": c.Lease} {
		if d <= 0 {
			return fmt.Errorf("%s: must be > 0, got %s", name, d)
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
// process runs. End-to-end tests start it in-process.
type Main struct {
	Config Config
	Log    *slog.Logger

	// ready, when set, is closed once the bus is provisioned and the roles
	// are starting.
	ready chan struct{}
	// server is the embedded NATS server, when there is one.
	server *server.Server
	// httpListening, when set, is told the HTTP role's address.
	httpListening func(addr string)
}

// Run starts everything and blocks until ctx ends, then stops cleanly:
// roles first, then the connection (drained), then the embedded server.
func (m *Main) Run(ctx context.Context) error {
	nc, err := m.connect()
	if err != nil {
		return err
	}
	defer func() {
		if err := nc.Drain(); err != nil {
			m.Log.Warn("drain", "err", err)
		}
		if m.server != nil {
			m.server.Shutdown()
			m.server.WaitForShutdown()
		}
		m.Log.Info("toolgate stopped")
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	buckets, err := m.provision(ctx, js)
	if err != nil {
		return err
	}
	d, err := m.deps(ctx, nc, js, buckets)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	if m.Config.Metrics != "" {
		g.Go(func() error { return serveMetrics(ctx, m.Config.Metrics, d.registry, m.Log) })
	}
	for _, name := range m.Config.Roles.resolve() {
		run := roles[name]
		log := m.Log.With("role", name)
		g.Go(func() error {
			// An error while shutting down is the shutdown, not a failure.
			if err := run(ctx, d, log); err != nil && ctx.Err() == nil {
				return fmt.Errorf("role %s: %w", name, err)
			}
			return nil
		})
	}
	if slices.Contains(m.Config.Roles.resolve(), "intake") {
		// "Serving" means a client can submit: wait for this process's
		// request API to answer, so nobody who waits for the log line
		// gets "no responders".
		if err := waitForService(ctx, nc); err != nil {
			return errors.Join(err, g.Wait())
		}
	}
	m.Log.Info("toolgate serving", "nats", nc.ConnectedUrlRedacted(), "replicas", m.Config.Replicas, "roles", strings.Join(m.Config.Roles.resolve(), ","))
	if m.ready != nil {
		close(m.ready)
	}
	return g.Wait()
}

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

// waitForService waits until toolgate's request API answers a ping.
func waitForService(ctx context.Context, nc *nats.Conn) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := nc.RequestWithContext(pctx, "$SRV.PING."+wire.ServiceName, nil)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// deps is what the roles share: one connection, one Machine.
type deps struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	buckets  *bus.Buckets
	machine  *machine.Machine
	engine   *policy.Engine
	policies *bus.PolicyStore
	grants   *bus.GrantStore
	// registry holds every Prometheus collector this process exports.
	registry *prometheus.Registry
	// httpListening, when set, is told the HTTP role's address.
	httpListening func(addr string)
}

func (m *Main) deps(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, b *bus.Buckets) (*deps, error) {
	policies := bus.NewPolicyStore(b.Policies)
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
	grants := bus.NewGrantStore(b.Grants)
	ledger := bus.NewBudgetLedger(b.Budgets)
	engine, err := policy.NewEngine(doc, grants, ledger)
	if err != nil {
		return nil, fmt.Errorf("stored policy: %w", err)
	}
	mach := machine.New(bus.NewKVStore(b.Calls), machine.WithEvaluator(engine))
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &deps{cfg: m.Config, nc: nc, js: js, buckets: b, machine: mach, engine: engine, policies: policies, grants: grants, registry: registry, httpListening: m.httpListening}, nil
}

// connect starts the embedded server, or dials the configured ones.
func (m *Main) connect() (*nats.Conn, error) {
	c := m.Config.Conn
	c.Name = "toolgate"
	if c.URLs != "" {
		return bus.Connect(c)
	}
	host, port, _ := splitHostPort(m.Config.Listen)
	srv, err := embedded.StartServer(embedded.ServerConfig{
		Host: host, Port: port, StoreDir: filepath.Join(m.Config.Data, "jetstream"),
		User: c.User, Password: c.Password, Token: c.Token,
	})
	if err != nil {
		return nil, err
	}
	m.server = srv
	if !isLoopback(host) && c.User == "" && c.Token == "" {
		m.Log.Warn("embedded NATS listens beyond this machine without credentials: set --nats-user/--nats-password or --nats-token", "listen", m.Config.Listen)
	}
	m.Log.Info("embedded NATS started", "listen", srv.ClientURL(), "data", m.Config.Data)
	c.URLs = srv.ClientURL()
	nc, err := bus.Connect(c, nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
	}
	return nc, err
}

// provision creates the buckets and streams, retrying while a cluster is
// still electing its JetStream leader.
func (m *Main) provision(ctx context.Context, js jetstream.JetStream) (*bus.Buckets, error) {
	topo := bus.Topology{Replicas: m.Config.Replicas, EventsMaxAge: m.Config.EventsMaxAge}
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		b, err := bus.Provision(pctx, js, topo)
		cancel()
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 408 {
			return nil, err // a refusal, not a leader election: retrying won't help
		}
		m.Log.Warn("provisioning failed, retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)):
		}
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

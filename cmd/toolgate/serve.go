package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
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
	if c.EventsMaxAge < 0 {
		return fmt.Errorf("--events-max-age: must be >= 0, got %s", c.EventsMaxAge)
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
	if _, err := m.provision(ctx, js); err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	relay := bus.NewRelay(js, bus.RelayConfig{AckWait: m.Config.RelayAckWait}, m.Log.With("role", "relay"))
	g.Go(func() error { return relay.Run(ctx) })
	m.Log.Info("toolgate serving", "nats", nc.ConnectedUrlRedacted(), "replicas", m.Config.Replicas)
	if m.ready != nil {
		close(m.ready)
	}
	return g.Wait()
}

// connect starts the embedded server, or dials the configured ones.
func (m *Main) connect() (*nats.Conn, error) {
	c := m.Config.Conn
	c.Name = "toolgate"
	if c.URLs != "" {
		return bus.Connect(c)
	}
	host, port, _ := splitHostPort(m.Config.Listen)
	srv, err := bus.StartServer(bus.ServerConfig{
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

// provision creates the bucket and streams, retrying while a cluster is
// still electing its JetStream leader.
func (m *Main) provision(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	topo := bus.Topology{Replicas: m.Config.Replicas, EventsMaxAge: m.Config.EventsMaxAge}
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kv, err := bus.Provision(pctx, js, topo)
		cancel()
		if err == nil {
			return kv, nil
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

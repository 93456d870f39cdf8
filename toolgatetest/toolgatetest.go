// Package toolgatetest starts toolgate for end-to-end tests: the real
// server.Main, with the roles a test chooses, over a real embedded NATS
// deployment (bus/bustest) or servers the test started itself, so that
// agents, executors, the CLI and browsers talk to it as they would in
// production.
package toolgatetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/server"
)

// Options choose what the started toolgate runs and with what.
type Options struct {
	// Roles are the roles to run (default: all of them).
	Roles []string
	// Policy is a policy document (YAML or JSON) put in force at start
	// (default: none, the stored or built-in policy).
	Policy string
	// Tokens are the HTTP API's bearer tokens, as --tokens-data takes
	// them (default: none, an open API on loopback).
	Tokens string
	// Clock replaces time.Now in the application layer, the policy
	// engine and the timer: the one clock a test scripts history with.
	Clock func() time.Time
	// LocalClock, without Clock, is the machine's own clock, off as a
	// machine's may be: toolgate tells deadlines and leases by the NATS
	// server's clock instead, correcting this one (for tests of clock
	// skew; default time.Now).
	LocalClock func() time.Time
	// Cluster runs toolgate on a 3-node cluster with replicas 3 instead
	// of its embedded server.
	Cluster bool
	// NATS runs the roles on servers started elsewhere (comma-separated
	// URLs), as another toolgate process on the same deployment would.
	NATS string
	// Creds is the credentials file to connect to NATS with: another
	// toolgate's own (see Gate.Sibling).
	Creds string
	// Replicas of the buckets and streams with NATS (default 1).
	Replicas int
	// Configure, when set, changes the server.Config before Main starts,
	// for what these options do not name.
	Configure func(*server.Config)
}

// Gate is a running toolgate and what a test needs to reach it.
type Gate struct {
	Main *server.Main
	// NATSURL is the URLs (comma-separated) of the NATS servers toolgate
	// uses.
	NATSURL string
	// HTTPURL is the HTTP API's base URL, empty without the http role.
	HTTPURL string
	// Data is toolgate's data directory; an embedded server's credentials
	// are in it (server.CredsPath).
	Data string
	// NC and JS are a connection of the test's own to toolgate's NATS.
	NC *nats.Conn
	JS jetstream.JetStream
	// Client is an agent's client over NC.
	Client *client.Client
	// Service is toolgate's application layer, for a test to act as
	// toolgate itself would (a timer expiring a call, say).
	Service *gate.Service
}

// Start runs server.Main with opts until the test ends, stopping it then
// and checking that it stops cleanly, and returns once it is ready: its
// request API answers (with the intake role) and its HTTP API listens
// (with the http role).
func Start(t testing.TB, opts Options) *Gate {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.Listen = "127.0.0.1:-1" // any free port
	cfg.HTTP = "127.0.0.1:0"
	// A revision handed to a relay that stopped with its test goes to
	// another relay soon.
	cfg.RelayAckWait = time.Second
	cfg.TokensData = opts.Tokens
	if opts.Roles != nil {
		cfg.Roles = opts.Roles
	}
	switch {
	case opts.NATS != "":
		cfg.Conn.URLs, cfg.Conn.CredsFile, cfg.Replicas = opts.NATS, opts.Creds, max(opts.Replicas, 1)
	case opts.Cluster:
		cfg.Conn.URLs, cfg.Replicas = bustest.ClientURLs(bustest.Cluster(t, 3)), 3
	}
	if opts.Policy != "" {
		cfg.PolicyFile = filepath.Join(t.TempDir(), "policy.yaml")
		require.NoError(t, os.WriteFile(cfg.PolicyFile, []byte(opts.Policy), 0o600))
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	m := &server.Main{Config: cfg, Log: bustest.Logger(), Version: "0.0.1-test", Clock: opts.Clock, LocalClock: opts.LocalClock}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "toolgate stops cleanly")
	})
	select {
	case <-m.Ready():
	case err := <-done:
		done <- nil // for the cleanup
		t.Fatalf("toolgate stopped before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("toolgate not ready after 60s")
	}
	g := &Gate{Main: m, NATSURL: m.NATSURL(), Data: cfg.Data, Service: m.Gate()}
	if cfg.Conn.URLs != "" {
		g.NATSURL = cfg.Conn.URLs
	}
	if addr := m.HTTPAddr(); addr != "" {
		g.HTTPURL = "http://" + addr
	}
	var creds []nats.Option
	switch {
	case cfg.Conn.URLs == "":
		// The embedded server takes only toolgate's credentials: the
		// test's connection is toolgate's own.
		creds = append(creds, nats.UserCredentials(server.CredsPath(cfg.Data, "toolgate")))
	case opts.Creds != "":
		creds = append(creds, nats.UserCredentials(opts.Creds))
	}
	creds = append(creds, cfg.Conn.TLSOptions()...)
	g.NC, g.JS = bustest.Connect(t, g.NATSURL, creds...)
	c, err := client.New(g.NC)
	require.NoError(t, err)
	g.Client = c
	return g
}

// ConnectAs connects to toolgate's embedded server with the credential
// serve issued at first start for a role, or with any other .creds file
// (a path), and returns a client over that connection: what an agent,
// executor, approver, viewer or admin holding it can do.
func (g *Gate) ConnectAs(t testing.TB, roleOrPath string) (*nats.Conn, *client.Client) {
	t.Helper()
	path := roleOrPath
	if !strings.ContainsRune(path, os.PathSeparator) {
		path = server.CredsPath(g.Data, roleOrPath)
	}
	opts, err := client.Credentials(path)
	require.NoError(t, err)
	nc, _ := bustest.Connect(t, g.NATSURL, opts...)
	c, err := client.New(nc)
	require.NoError(t, err)
	return nc, c
}

// Sibling is the Options of another toolgate process on g's embedded
// server, running roles: it connects with g's own credential.
func (g *Gate) Sibling(roles ...string) Options {
	return Options{NATS: g.NATSURL, Creds: g.Creds(), Roles: roles}
}

// Creds is the credentials file of g's own identity on its embedded
// server.
func (g *Gate) Creds() string { return server.CredsPath(g.Data, "toolgate") }

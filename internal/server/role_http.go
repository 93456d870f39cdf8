package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/httpapi"
)

// Hosts is --allowed-hosts: the Host header values the HTTP API answers
// (httpapi.CheckAllowedHosts says which forms). Empty: httpapi.DefaultAllowedHosts
// of --http.
type Hosts []string

// String implements flag.Value.
func (h *Hosts) String() string { return strings.Join(*h, ",") }

// Set implements flag.Value: a comma-separated list.
func (h *Hosts) Set(v string) error {
	*h = nil
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*h = append(*h, name)
		}
	}
	return h.Validate()
}

// Validate says what is wrong with h, naming the entry.
func (h Hosts) Validate() error { return httpapi.CheckAllowedHosts(h) }

// loadTokens reads the HTTP API's bearer tokens from --tokens and
// --tokens-data; none at all leaves the API open.
func loadTokens(cfg Config) (*httpapi.Tokens, error) {
	data := []byte(cfg.TokensData)
	if cfg.TokensFile != "" {
		file, err := os.ReadFile(cfg.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		data = append(append(data, '\n'), file...)
	}
	return httpapi.ParseTokens(data)
}

// checkHTTP names the flag of the first bad setting of the http role.
func checkHTTP(c Config) error {
	if _, _, err := splitHostPort(c.HTTP); err != nil {
		return fmt.Errorf("--http %q: %v", c.HTTP, err)
	}
	if err := c.AllowedHosts.Validate(); err != nil {
		return fmt.Errorf("--allowed-hosts: %v", err)
	}
	return c.OIDC.Check()
}

// listenHTTP builds the HTTP API and listens on its address before the
// roles start, so that whoever waits for Main to be ready can use both;
// log is the process's. Without tokens it serves only on loopback, where
// whoever can reach it is on this machine; bound anywhere else it refuses
// to start open.
func listenHTTP(d *deps, log *slog.Logger) error {
	cfg := d.cfg
	tokens, err := loadTokens(cfg)
	if err != nil {
		return err
	}
	host, _, _ := splitHostPort(cfg.HTTP)
	if tokens.Open() && !cfg.OIDC.Enabled() {
		if !isLoopback(host) {
			return fmt.Errorf("--http %s is not loopback: give bearer tokens with --tokens or --tokens-data", cfg.HTTP)
		}
		log.Warn("HTTP API is open: no tokens configured, every caller on this machine is an admin", "http", cfg.HTTP)
	}
	hosts := []string(cfg.AllowedHosts)
	if len(hosts) == 0 {
		hosts = httpapi.DefaultAllowedHosts(cfg.HTTP)
	}
	if slices.Contains(hosts, "*") {
		log.Info("HTTP API answers any Host header: give the names clients use with --allowed-hosts", "http", cfg.HTTP)
	}
	d.httpHandler, err = httpapi.New(httpapi.Config{
		Gate:   d.gate,
		Events: d.events,
		Await: func(ctx context.Context, read client.ReadFunc, pendingID string, opts ...client.AwaitOption) (client.Outcome, error) {
			return client.AwaitWith(ctx, d.nc, read, pendingID, opts...)
		},
		Tokens:   tokens,
		Gatherer: d.registry,
		Ready: func(ctx context.Context) error {
			if !d.nc.IsConnected() {
				return errors.New("NATS is not connected")
			}
			_, err := d.buckets.Calls.Status(ctx)
			return err
		},
		Log: log.With("role", "http"),

		AllowedHosts: hosts,
		OIDC:         cfg.OIDC,
	})
	if err != nil {
		return err
	}
	d.httpListener, err = net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	return nil
}

// runHTTP serves the HTTP API and the web inbox that listenHTTP built.
func runHTTP(ctx context.Context, d *deps, log *slog.Logger) error {
	l := d.httpListener
	// A client that sends its request a byte at a time, or keeps idle
	// connections open, holds nothing for long. The event stream and the
	// Claude Code hooks, which wait for a human, lift the write deadline
	// for themselves.
	hs := &http.Server{
		Handler:           d.httpHandler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	log.Info("HTTP API and inbox", "url", "http://"+l.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		return nil
	}
}

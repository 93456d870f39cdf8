package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/machine"
)

// mcpGatewayCmd is `toolgate mcp-gateway`: an MCP server, on stdio or
// streamable HTTP, in front of the MCP servers its config names, that
// puts every tools/call through toolgate (docs/mcp-gateway.md).
func mcpGatewayCmd(out cliOutput) *cliCmd {
	c := newCLICmd("mcp-gateway", "mcp-gateway --config FILE [--http HOST:PORT] [flags]",
		"An MCP gateway: serves MCP (stdio, or streamable HTTP with --http) in front of the MCP servers\n"+
			"--config names, forwards what the client asks of them, and submits every tools/call to\n"+
			"toolgate first (tool mcp__<server>__<tool>): only a call toolgate lets run reaches its server,\n"+
			"with the arguments toolgate recorded; a refusal is answered as a tool error saying who and why.\n"+
			"It connects with an agent's credential, whose name is the calls' caller.", out).connFlags()
	config := c.fs.String("config", "", "the MCP servers to stand in front of: a YAML or JSON file (docs/mcp-gateway.md)")
	addr := c.fs.String("http", "", "serve streamable HTTP on HOST:PORT (a loopback address) instead of stdio")
	opts := mcpgateway.Options{Timeout: mcpgateway.DefaultTimeout, Version: version}
	c.fs.StringVar(&opts.Team, "team", "", "team of the calls, for the policy")
	c.fs.StringVar(&opts.Conversation, "conversation", "", "conversation of every call (default: one per MCP session)")
	c.fs.Var(durationFlag{&opts.Timeout}, "timeout", "how long the MCP client waits for a tool call (its request timeout): seconds (60) or a duration (10m)")
	c.fs.Var(durationFlag{&opts.Wait}, "wait", "how long a call waits for toolgate's verdict before it is withdrawn and answered as refused;\n"+
		"at most --timeout less 10s (less half of it, under 20s), and that when 0. A call whose approval timeout\n"+
		"is at most --wait, and rejected then (autoRejectOnTimeout), is refused at its deadline instead")
	opts.IdleTimeout = mcpgateway.DefaultIdleTimeout
	c.fs.Var(durationFlag{&opts.IdleTimeout}, "idle-timeout", "with --http: end a session that has had no request and no open stream for this long (its client went away\n"+
		"without ending it): its waiting calls are withdrawn and its upstream servers stopped; seconds or a duration")
	c.fs.StringVar(&opts.InboxURL, "inbox-url", "", "toolgate's inbox (serve --http's address, as its users reach it): a task waiting for a decision\n"+
		"links its call's page there (<inbox-url>/#/calls/<pendingId>)")
	connectTimeout := defaultConnectTimeout
	c.fs.Var(durationFlag{&connectTimeout}, "connect-timeout", "how long a call waits for the connection to toolgate while it is down, before it is refused\n"+
		"saying toolgate is unreachable; the connection is retried for as long as the gateway runs")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *config == "" {
			return c.usagef("--config: required (the MCP servers to stand in front of)")
		}
		if _, err := mcpgateway.WaitFor(opts.Wait, opts.Timeout); err != nil {
			return c.usagef("--wait, --timeout: %v", err)
		}
		if *addr != "" {
			if err := loopback(*addr); err != nil {
				return c.usagef("--http: %v", err)
			}
		}
		cfg, err := mcpgateway.LoadConfig(*config)
		if errors.Is(err, machine.ErrInvalid) {
			return c.usagef("--config: %v", err)
		} else if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if opts.IdleTimeout <= 0 {
			return c.usagef("--idle-timeout: want a positive duration, got %s", opts.IdleTimeout)
		}
		if opts.InboxURL != "" {
			if u, err := url.Parse(opts.InboxURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				return c.usagef("--inbox-url: want an http or https URL without a query or fragment, got %q", opts.InboxURL)
			}
		}
		if connectTimeout <= 0 {
			return c.usagef("--connect-timeout: want a positive duration, got %s", connectTimeout)
		}
		// stdout is the MCP stream on stdio: everything else goes to stderr,
		// which MCP clients keep as the server's log.
		opts.Log = slog.New(slog.NewTextHandler(out.stderr, nil)).With("component", "mcp-gateway")
		opts.Stderr = out.stderr
		nc, cl, err := c.connect(&background{opts.Log, connectTimeout})
		if err != nil {
			return err
		}
		defer nc.Close()
		gw, err := mcpgateway.New(cfg, cl, opts)
		if err != nil {
			return err
		}
		if *addr == "" {
			return gw.Serve(ctx, &mcp.StdioTransport{})
		}
		l, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: 10 * time.Second}
		opts.Log.Info("serving MCP over streamable HTTP", "url", "http://"+l.Addr().String()+"/")
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		select {
		case err := <-served:
			gw.Close()
			return err
		case <-ctx.Done():
		}
		gw.Close() // withdraws the calls still waiting, stops the upstream servers
		return srv.Close()
	}
	return c
}

// defaultConnectTimeout is how long a call of an MCP server (the gateway,
// `toolgate mcp`) waits for its connection to toolgate while it is down.
const defaultConnectTimeout = 5 * time.Second

// loopback refuses an address beyond this machine: the gateway's HTTP
// side takes no credential of its own, and whoever reaches it submits
// calls as the gateway's identity.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address: the gateway's HTTP side authenticates nobody, so it listens on this machine only (127.0.0.1, ::1, localhost)", addr)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/mcpgateway"
)

// The verb is added to cliVerbs here, which keeps that table's
// alignment (and its other lines) as they are.
func init() { cliVerbs["mcp-gateway"] = cliMCPGateway }

// cliMCPGateway is `toolgate mcp-gateway`: an MCP server, on stdio or
// streamable HTTP, in front of the MCP servers its config names, that
// puts every tools/call through toolgate (docs/mcp-gateway.md).
func cliMCPGateway(ctx context.Context, args []string, out cliOutput) error {
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
	nc, cl, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	// stdout is the MCP stream on stdio: everything else goes to stderr,
	// which MCP clients keep as the server's log.
	opts.Log = slog.New(slog.NewTextHandler(out.stderr, nil)).With("component", "mcp-gateway")
	opts.Stderr = out.stderr
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

package mcpgateway_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/internal/server"
)

// toolgate runs a toolgate serving from data with its NATS on listen, and
// returns its NATS URL and what stops it.
func toolgate(t *testing.T, data, listen string) (string, func()) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Data, cfg.Listen, cfg.HTTP = data, listen, "127.0.0.1:0"
	cfg.Roles = []string{"relay", "intake", "timer"}
	cfg.RelayAckWait = time.Second
	cfg.PolicyFile = filepath.Join(data, "policy.yaml")
	require.NoError(t, os.WriteFile(cfg.PolicyFile, []byte(testPolicy), 0o600))
	m := &server.Main{Config: cfg, Log: bustest.Logger(), Version: "0.0.1-test"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			assert.NoError(t, <-done, "toolgate stops cleanly")
		}
	}
	t.Cleanup(stop)
	select {
	case <-m.Ready():
	case err := <-done:
		done <- nil
		t.Fatalf("toolgate stopped before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("toolgate not ready after 60s")
	}
	return m.NATSURL(), stop
}

// reconnecting connects as role the way the gateway's command does: in
// the background, again whenever the connection drops, a request waiting
// at most connectWait for it.
func reconnecting(t *testing.T, natsURL, data, role string, connectWait time.Duration) *client.Client {
	t.Helper()
	opts, err := client.Credentials(server.CredsPath(data, role))
	require.NoError(t, err)
	nc, err := bus.Connect(bus.ConnConfig{URLs: natsURL, Name: t.Name()}, append(opts, nats.RetryOnFailedConnect(true), nats.ReconnectWait(100*time.Millisecond))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithConnectWait(connectWait), client.WithUnavailableWait(connectWait))
	require.NoError(t, err)
	return c
}

// TestGateway_ToolgateOutage: with toolgate down, a call through the
// gateway is answered within the connect timeout, naming the outage, and
// nothing is recorded of it; once toolgate is back (same address), the
// next call goes through.
func TestGateway_ToolgateOutage(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	natsURL, stop := toolgate(t, data, "127.0.0.1:-1")
	agent := reconnecting(t, natsURL, data, "agent", 5*time.Second)
	e := &env{t: t, agent: agent, approver: reconnecting(t, natsURL, data, "approver", 5*time.Second), log: filepath.Join(t.TempDir(), "upstream.log")}
	cs := e.connect(e.gateway(map[string]mcpgateway.Upstream{"files": e.files()}, mcpgateway.Options{}), "outage-test", nil)

	echo := func(text string) (*mcp.CallToolResult, time.Duration) {
		t.Helper()
		began := time.Now()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
		require.NoError(t, err)
		return res, time.Since(began)
	}
	res, _ := echo("before")
	require.False(t, res.IsError, text(t, res))

	stop()
	res, took := echo("during")
	assert.Less(t, took, 6*time.Second, "answered within the connect timeout")
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "toolgate: mcp__files__echo was not run: ")
	assert.Contains(t, text(t, res), "toolgate is unreachable at "+natsURL)
	assert.NotContains(t, text(t, res), "no decision")

	u, err := url.Parse(natsURL)
	require.NoError(t, err)
	toolgate(t, data, u.Host)
	res, _ = echo("after")
	require.False(t, res.IsError, text(t, res))
	assert.Equal(t, "echo: after", text(t, res))
	calls := e.calls("mcp__files__echo")
	assert.Len(t, calls, 2, "the call made during the outage was never recorded: %s", describe(calls))
	got := e.received()
	require.Len(t, got, 2)
	assert.JSONEq(t, `{"text":"after"}`, string(got[1].Args), "the upstream never heard of the call made during the outage")
}

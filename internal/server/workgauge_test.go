package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestRunnableCallsGauge: /metrics says how many calls wait for an
// executor: one that runs at once, with no executor running, until one
// takes it.
func TestRunnableCallsGauge(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "http"}, Policy: "default: {requiresApprovalTools: none}"})
	waitFor := func(want string) { waitForMetric(t, g.HTTPURL, want) }
	waitFor("toolgate_runnable_calls 0")
	_, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: "c1", ToolName: "deploy", CallerBotID: "bot", ConversationID: "gauge"})
	require.NoError(t, err)
	waitFor("toolgate_runnable_calls 1")

	_, exec := g.ConnectAs(t, "executor")
	x, err := exec.NewExecutor(client.ExecutorOptions{})
	require.NoError(t, err)
	x.Handle("deploy", func(context.Context, client.Call) (client.Result, error) { return client.Result{}, nil })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	waitFor("toolgate_runnable_calls 0")
}

// waitForMetric waits until the /metrics of the toolgate at url has the
// line want (a name, a space and a value).
func waitForMetric(t *testing.T, url, want string) {
	t.Helper()
	name, _, _ := strings.Cut(want, " ")
	bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, want, func() (bool, any) {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, name+" ") {
				return line == want, line
			}
		}
		return false, "no " + name
	})
}

// TestAnalyticsLagGauge: /metrics says how many events the analytics have
// yet to take in, which falls back to 0 once they have taken in a call's.
func TestAnalyticsLagGauge(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "http", "analytics"}})
	_, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: "c1", ToolName: "deploy", CallerBotID: "bot", ConversationID: "lag"})
	require.NoError(t, err)
	bustest.WaitRelayed(t, g.JS)
	waitForMetric(t, g.HTTPURL, "toolgate_analytics_lag_events 0")
	r, err := g.Client.Analytics(t.Context(), wire.AnalyticsRequest{Hours: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, r.Totals.Calls, "the call is in the aggregates: %+v", r.Totals)
}

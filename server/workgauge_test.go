package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestRunnableCallsGauge: /metrics says how many calls wait for an
// executor: one that runs at once, with no executor running, until one
// takes it.
func TestRunnableCallsGauge(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "http"}, Policy: "default: {requiresApprovalTools: none}"})
	gauge := func() (bool, any) {
		resp, err := http.Get(g.HTTPURL + "/metrics")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "toolgate_runnable_calls ") {
				return true, line
			}
		}
		return false, "no toolgate_runnable_calls"
	}
	waitFor := func(want string) {
		bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, want, func() (bool, any) {
			ok, line := gauge()
			return ok && line == want, line
		})
	}
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

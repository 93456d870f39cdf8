package analytics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// clock is a settable clock for a Machine.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// startRelay runs a relay until the test ends.
func startRelay(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	bustest.RunRelay(t, js)
}

// waitRelayed waits until the relay has published an event for every
// revision written so far, and returns the events stream's last sequence.
func waitRelayed(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := t.Context()
	bustest.WaitRelayed(t, js)
	s, err := js.Stream(ctx, wire.EventsStream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.LastSeq
}

// evaluator answers by tool: the tools of a scripted run.
var evaluator = machine.EvaluatorFunc(func(_ context.Context, c machine.Call) (machine.Verdict, error) {
	switch c.ToolName {
	case "read_file":
		return machine.Verdict{Action: machine.ActionRun, Reason: "readOnlyTools"}, nil
	case "rm_rf":
		return machine.Verdict{Action: machine.ActionDeny, Reason: "deny rm_rf"}, nil
	case "send_email":
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: 5 * time.Minute, AutoRejectOnTimeout: false, Reason: "ask"}, nil
	}
	return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: 5 * time.Minute, AutoRejectOnTimeout: true, Reason: "ask"}, nil
})

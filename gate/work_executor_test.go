package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestTakeWork_AnExecutorWaitsWithARequestForEachFreeSlot: an executor
// with free slots keeps a request for work waiting at toolgate for each
// (one call each), so that as many approvals made one after another
// each find one to claim their call for in their own write; a request
// asking for every free slot would leave one waiting, and the approvals
// after the first would go through the work queue.
func TestTakeWork_AnExecutorWaitsWithARequestForEachFreeSlot(t *testing.T) {
	t.Parallel()
	const slots = 3
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default: {requiresApprovalTools: all}\n"})
	_, ex := g.ConnectAs(t, "executor")
	x, err := ex.NewExecutor(client.ExecutorOptions{Concurrency: slots})
	require.NoError(t, err)
	release := make(chan struct{})
	x.Handle("deploy", func(ctx context.Context, _ client.Call) (client.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return client.Result{Output: json.RawMessage(`true`)}, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = x.Run(ctx) })
	t.Cleanup(func() { close(release); cancel(); wg.Wait() })

	// Every slot's request waits: reserve them all, as approvals would,
	// and give them back.
	var reserved []func(*machine.Entry)
	bustest.Eventually(t, 10*time.Second, time.Millisecond, "a request for work of deploy waiting for each slot", func() (bool, any) {
		for len(reserved) < slots {
			handOver, ok := gate.ReserveTaker(g.Service, "deploy")
			if !ok {
				return false, fmt.Sprintf("%d waiting of %d", len(reserved), slots)
			}
			reserved = append(reserved, handOver)
		}
		return true, nil
	})
	for _, handOver := range reserved {
		handOver(nil)
	}

	for i := range slots {
		e, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: fmt.Sprint("slot-", i), ToolName: "deploy", CallerBotID: "agent", ConversationID: "c1"})
		require.NoError(t, err)
		decided, err := g.Service.Decide(t.Context(), gate.System, e.PendingID, machine.Decision{Approve: true, By: "alice"})
		require.NoError(t, err)
		require.Equal(t, machine.StateExecuting, decided.Status, "approval %d claimed its call in its own write", i+1)
	}
}

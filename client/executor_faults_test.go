package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestExecutor_StreamLeaderLossRunsNoHandlerTwice runs calls through two
// executors on a 3-node cluster (replicas 3) whose tool_calls leader is
// the server the executors are connected to. Mid-load that server dies,
// taking with it the claims, heartbeats and outcomes in flight through
// it; later the new leader steps down. No executor dies, so no handler
// may run twice: every call completes after exactly one run, on its first
// attempt.
func TestExecutor_StreamLeaderLossRunsNoHandlerTwice(t *testing.T) {
	t.Parallel()
	const calls = 150
	servers := bustest.Cluster(t, 3)
	const victim = 0
	toolgatetest.Start(t, toolgatetest.Options{
		NATS: bustest.ClientURLs(servers), Replicas: 3, Roles: []string{"relay", "intake", "timer"},
		Policy: "default: {requiresApprovalTools: none, maxExecutionAttempts: 3}",
	})
	survivors := bustest.ClientURLs(servers[1:])
	admin, adminJS := bustest.Connect(t, survivors)
	stream := "KV_" + wire.CallsBucket
	bustest.MoveStreamLeader(t, admin, servers, stream, victim)

	var mu sync.Mutex
	runs := map[string]int{} // pendingId → handler invocations
	var ran atomic.Int64
	handler := func(_ context.Context, c client.Call) (client.Result, error) {
		mu.Lock()
		runs[c.PendingID]++
		mu.Unlock()
		ran.Add(1)
		return client.Result{Output: json.RawMessage(`{}`)}, nil
	}
	logs := &countingHandler{counts: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, id := range []string{"exec-a", "exec-b"} {
		// The victim first, and only then the others: every executor's
		// requests go through the server that dies.
		nc, err := bus.Connect(bus.ConnConfig{URLs: bustest.ClientURLs(servers), Name: id}, nats.DontRandomize())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		require.Equal(t, servers[victim].ClientURL(), nc.ConnectedUrl())
		c, err := client.New(nc)
		require.NoError(t, err)
		// The lease outlasts an election on a loaded machine: a run
		// again would be the executor's reports failing, not a lease
		// the machine's load let run out.
		x, err := c.NewExecutor(client.ExecutorOptions{ID: id, Lease: 10 * time.Second, Concurrency: 8, Log: slog.New(logs)})
		require.NoError(t, err)
		x.Handle("job", handler)
		wg.Go(func() { _ = x.Run(ctx) })
	}

	agentNC, _ := bustest.Connect(t, survivors)
	agent, err := client.New(agentNC)
	require.NoError(t, err)
	var submitted atomic.Int64
	load := new(errgroup.Group)
	load.SetLimit(16)
	go func() {
		for i := range calls {
			load.Go(func() error {
				_, err := agent.Submit(t.Context(), call("faults", fmt.Sprint("j", i), "job", `{}`))
				submitted.Add(1)
				return err
			})
		}
	}()

	bustest.Eventually(t, 60*time.Second, time.Millisecond, "the handlers got going", func() (bool, any) { n := ran.Load(); return n >= calls/3, n })
	servers[victim].Shutdown()
	killedAt := ran.Load()
	bustest.Eventually(t, 60*time.Second, time.Millisecond, "the handlers went on after the leader died", func() (bool, any) { n := ran.Load(); return n >= 2*calls/3, n })
	next := -1
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the stream has a leader (not the first server)", func() (bool, any) { next = bustest.StreamLeader(servers, stream); return next > 0, next })
	bustest.MoveStreamLeader(t, admin, servers, stream, 3-next)
	steppedAt := ran.Load()
	bustest.Eventually(t, 60*time.Second, time.Millisecond, "every call submitted", func() (bool, any) { n := submitted.Load(); return n == calls, n })
	require.NoError(t, load.Wait())

	var states map[machine.State]int
	var entries []*machine.Entry
	awaitStates(t, adminJS, "faults", map[machine.State]int{machine.StateCompletedSuccess: calls})
	bustest.Eventually(t, 60*time.Second, time.Second, "a list of every call completed", func() (bool, any) {
		var err error
		entries, err = agent.List(t.Context(), wire.ListRequest{ConversationID: "faults", Limit: 1000})
		if err != nil {
			return false, err
		}
		states = map[machine.State]int{}
		for _, e := range entries {
			states[e.Status]++
		}
		return states[machine.StateCompletedSuccess] == calls, states
	})
	t.Logf("killed the leader after %d runs, stepped the next down after %d; executors' reports: %v", killedAt, steppedAt, logs.snapshot())

	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for id, n := range runs {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times", id, n))
		}
	}
	sort.Strings(twice)
	assert.Empty(t, twice, "no executor died, so no handler may run twice")
	assert.Len(t, runs, calls)
	for _, e := range entries {
		assert.Equal(t, 1, e.ExecutionAttempts, "%s: attempts", e.PendingID)
	}
}

// countingHandler counts an executor's log records by message, so that a
// test can say how often it had to ask toolgate again.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Message]++
	return nil
}

func (h *countingHandler) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.counts))
	for k, v := range h.counts {
		out[k] = v
	}
	return out
}

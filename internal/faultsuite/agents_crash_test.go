package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestServe_SIGKILLedTwiceEveryAgentIsAnswered kills `toolgate serve`
// (embedded NATS and all) twice with SIGKILL while agents submit and await
// calls that a human approves as they come, and starts it again each
// time. Every agent gets its answer: one waiting at a kill within 5s of
// the restart, and any within 5s of its call's approval (or of the
// restart that came between the two).
func TestServe_SIGKILLedTwiceEveryAgentIsAnswered(t *testing.T) {
	t.Parallel()
	const agents, calls = 16, 120
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("default: {requiresApprovalTools: [deploy]}\n"), 0o600))
	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	args := []string{"--data", filepath.Join(dir, "data"), "--listen", listen, "--roles", "relay,intake,timer",
		"--relay-ack-wait", "1s", "--policy", policy}
	proc := startServe(t, args...)
	url := "nats://" + listen

	type call struct {
		id                         string
		started, decided, answered time.Time
		kind                       client.Kind
		err                        error
	}
	var mu sync.Mutex
	byID := map[string]*call{}
	var answered int
	ctx, stop := context.WithCancel(t.Context())
	defer stop()

	// The human: approves each call as it is submitted, trying again while
	// toolgate is down. A conflict is an approval of theirs that got
	// through without its answer. (When it was written, the entry says.)
	decider := newAgentClient(t, url)
	pending := make(chan string, calls)
	var wg sync.WaitGroup
	wg.Go(func() {
		var deciding sync.WaitGroup
		defer deciding.Wait()
		for {
			var id string
			select {
			case <-ctx.Done():
				return
			case id = <-pending:
			}
			deciding.Go(func() {
				for ctx.Err() == nil {
					actx, cancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := decider.Decide(actx, wire.DecideRequest{PendingID: id, Approved: true, By: "alice"})
					cancel()
					if err == nil || errors.Is(err, machine.ErrConflict) {
						return
					}
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			})
		}
	})

	// The agents: each submits a call, awaits its answer, and goes on.
	next := make(chan int, calls)
	for i := range calls {
		next <- i
	}
	close(next)
	var agentsDone sync.WaitGroup
	for range agents {
		c := newAgentClient(t, url)
		agentsDone.Go(func() {
			for i := range next {
				started := time.Now()
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				e, err := c.Submit(cctx, machine.Call{ToolCallID: fmt.Sprint("c", i), ToolName: "deploy", CallerBotID: "bot", ConversationID: "crash"})
				if err != nil {
					cancel()
					mu.Lock()
					id := fmt.Sprintf("crash.c%d (submit)", i)
					byID[id] = &call{id: id, err: err}
					answered++
					mu.Unlock()
					continue
				}
				mu.Lock()
				byID[e.PendingID] = &call{id: e.PendingID, started: started}
				mu.Unlock()
				pending <- e.PendingID
				out, err := c.Await(cctx, e.PendingID)
				cancel()
				mu.Lock()
				cl := byID[e.PendingID]
				cl.answered, cl.kind, cl.err = time.Now(), out.Kind, err
				if out.Entry != nil {
					cl.decided = time.UnixMilli(out.Entry.DecisionTime)
				}
				answered++
				mu.Unlock()
			}
		})
	}
	progress := func() int { mu.Lock(); defer mu.Unlock(); return answered }

	type restart struct{ killed, serving time.Time }
	var restarts []restart
	for _, at := range []int{calls / 3, 2 * calls / 3} {
		bustest.Eventually(t, 60*time.Second, time.Millisecond, fmt.Sprintf("%d of %d calls answered", at, calls), func() (bool, any) { n := progress(); return n >= at, n })
		proc.kill()
		killed := time.Now()
		proc = startServe(t, args...)
		restarts = append(restarts, restart{killed, time.Now()})
	}
	all := make(chan struct{})
	go func() { agentsDone.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("agents still waiting: %d of %d calls answered", progress(), calls)
	}
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, byID, calls)
	var spanned int
	var worstRestart, worstDecision time.Duration
	var late []string
	for _, c := range byID {
		if !assert.NoError(t, c.err, c.id) {
			continue
		}
		assert.Equal(t, client.Approved, c.kind, c.id)
		// An agent waiting when toolgate was killed is answered within
		// 5s of its restart (of the last, if it waited through both).
		var through *restart
		for _, r := range restarts {
			if c.started.Before(r.killed) && c.answered.After(r.killed) {
				through = &r
			}
		}
		if through != nil {
			spanned++
			d := c.answered.Sub(through.serving)
			worstRestart = max(worstRestart, d)
			if d > 5*time.Second {
				late = append(late, fmt.Sprintf("%s answered %s after the restart it waited through", c.id, d.Round(time.Millisecond)))
			}
		}
		// And any agent within 5s of its call's approval, or of the
		// restart that came after the approval and before its answer.
		from := c.decided
		for _, r := range restarts {
			if r.killed.Before(c.answered) && r.serving.After(from) {
				from = r.serving
			}
		}
		d := c.answered.Sub(from)
		worstDecision = max(worstDecision, d)
		if d > 5*time.Second {
			late = append(late, fmt.Sprintf("%s answered %s after its approval", c.id, d.Round(time.Millisecond)))
		}
	}
	slices.Sort(late)
	assert.Empty(t, late)
	for i, r := range restarts {
		t.Logf("restart %d took %s", i+1, r.serving.Sub(r.killed).Round(time.Millisecond))
	}
	t.Logf("%d agents waited through a restart, the last answered %s after it; the latest answer came %s after its approval",
		spanned, worstRestart.Round(time.Millisecond), worstDecision.Round(time.Millisecond))
}

// newAgentClient connects as an agent process would, with the SDK's
// defaults.
func newAgentClient(t *testing.T, url string) *client.Client {
	t.Helper()
	nc, _ := servetest.Connect(t, url)
	c, err := client.New(nc)
	require.NoError(t, err)
	return c
}

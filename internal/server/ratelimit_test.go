package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestRateLimit_AgentsRacing: 8 agents, each with its own credential,
// submit 10 calls a rate rule matches, all at once: exactly max run,
// the rest wait for a human with the rule and the count in their
// reason. Once the window has slid past them, a call runs again.
func TestRateLimit_AgentsRacing(t *testing.T) {
	t.Parallel()
	clock := toolgatetest.FixedClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Clock: clock.Now, Policy: `
default:
  requiresApprovalTools: none
  rateLimits:
    - {match: "Bash(rm *)", max: 3, per: 10m, scope: team, then: ask}
`})
	ctx := t.Context()
	_, admin := g.ConnectAs(t, "admin")
	const agents, calls, limit = 8, 10, 3
	clients := make([]*client.Client, agents)
	for i := range clients {
		issued, err := admin.IssueCredential(ctx, fmt.Sprintf("agent-%d", i), wire.RoleAgent)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "agent.creds")
		require.NoError(t, os.WriteFile(path, []byte(issued.Creds), 0o600))
		_, clients[i] = g.ConnectAs(t, path)
	}

	submit := func(c *client.Client, n int) *machine.Entry {
		e, err := c.Submit(ctx, machine.Call{ToolName: "Bash", ConversationID: fmt.Sprintf("conv-%d", n%3), Team: "ops",
			Arguments: []byte(fmt.Sprintf(`{"command":"rm /tmp/scratch-%d"}`, n))})
		require.NoError(t, err)
		return e
	}
	var next atomic.Int64
	var mu sync.Mutex
	var entries []*machine.Entry
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for n := int(next.Add(1)); n <= calls; n = int(next.Add(1)) {
				e := submit(c, n)
				mu.Lock()
				entries = append(entries, e)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, entries, calls)

	const reason = `rateLimits[0] "Bash(rm *)" (default): 3 of 3 in the last 10m for team ops`
	var ran, asked int
	callers := map[string]bool{}
	for _, e := range entries {
		callers[e.CallerBotID] = true
		switch e.Status {
		case machine.StatePendingApproval:
			asked++
			assert.Equal(t, reason, e.StatusReason)
		case machine.StateApproved, machine.StateScheduled:
			ran++
		default:
			t.Errorf("%s: unexpected status %s (%s)", e.PendingID, e.Status, e.StatusReason)
		}
	}
	assert.Equal(t, limit, ran, "exactly max run in the window")
	assert.Equal(t, calls-limit, asked, "the rest are asked")
	assert.Greater(t, len(callers), 1, "the agents raced as themselves")

	// Another team has its own window; ops's frees ten minutes on.
	other, err := clients[0].Submit(ctx, machine.Call{ToolName: "Bash", ConversationID: "conv-q", Team: "qa",
		Arguments: []byte(`{"command":"rm /tmp/x"}`)})
	require.NoError(t, err)
	assert.NotEqual(t, machine.StatePendingApproval, other.Status, other.StatusReason)
	assert.Equal(t, machine.StatePendingApproval, submit(clients[1], 11).Status)
	clock.Skip(10 * time.Minute)
	assert.NotEqual(t, machine.StatePendingApproval, submit(clients[2], 12).Status, "the window slid past the first slots")
}

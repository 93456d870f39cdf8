package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestTimerRole_TellsTheTimeByTheProcessClock: the timer role acts on a
// deadline when the process's clock (Main.Clock) passes it: an hour's
// approval deadline falls due when the test's clock skips the hour.
func TestTimerRole_TellsTheTimeByTheProcessClock(t *testing.T) {
	t.Parallel()
	clock := toolgatetest.FixedClock(time.Now())
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "timer"}, Clock: clock.Now, Policy: `
default:
  requiresApprovalTools: [deploy]
  approvalTimeoutMs: 3600000
  autoRejectOnTimeout: true
`})
	e, err := g.Client.Submit(t.Context(), machine.Call{ToolName: "deploy", ConversationID: "conv", Arguments: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	clock.Skip(time.Hour)
	var got *machine.Entry
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the call rejected by timeout", func() (bool, any) {
		got, err = g.Client.Get(t.Context(), e.PendingID)
		if err != nil {
			return false, err
		}
		return got.Status == machine.StateRejectedByTimeout, got.Status
	})
	assert.Equal(t, e.ApprovalTimeoutAt, got.DecisionTime, "at the clock's time, the deadline")
}

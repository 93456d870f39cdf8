package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestPolicy_EveryProcessFollowsThePolicyInForce: a policy set through
// one process is in force in another that runs only roles which read it
// (the HTTP API, which submits the hooks' calls; the timer, which asks
// it before approving at a deadline), not only in those with the intake.
func TestPolicy_EveryProcessFollowsThePolicyInForce(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default: {requiresApprovalTools: none}\n"})
	for _, roles := range [][]string{{"http"}, {"timer"}} {
		h := toolgatetest.Start(t, g.Sibling(roles...))
		_, err := g.Service.SetPolicy(t.Context(), gate.System, wire.PolicyDocument{Document: fmt.Sprintf("default:\n  requiresApprovalTools: none\n  rules: {deny: [wipe_%s]}\n", roles[0])})
		require.NoError(t, err)
		n := 0
		bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, roles[0]+"'s process denies what the policy now denies", func() (bool, any) {
			n++
			e, err := h.Service.Submit(t.Context(), gate.System, machine.Call{ToolName: "wipe_" + roles[0], ToolCallID: fmt.Sprint("t", n), ConversationID: roles[0], CallerBotID: "bot"})
			if err != nil {
				return false, err
			}
			return e.Status == machine.StateRejectedByPolicy, e.Status
		})
	}
}

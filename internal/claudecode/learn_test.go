package claudecode_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// An approval for the session, or always, is answered with the rule it
// gave (updatedPermissions), so Claude Code's own rules learn it: for the
// session in the session, always in the project's local settings. An
// approval once teaches nothing.
func TestHooks_PermissionRequestTeachesClaudeCodeTheGrant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scope machine.Scope
		want  string
	}{
		{machine.ScopeSession, `[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"git push origin feature"}],"behavior":"allow","destination":"session"}]`},
		{machine.ScopeAlways, `[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"git push origin feature"}],"behavior":"allow","destination":"localSettings"}]`},
		{machine.ScopeOnce, ``},
	} {
		t.Run(string(tc.scope), func(t *testing.T) {
			t.Parallel()
			c := startGate(t) // an always grant covers every session of the gate
			session := "learn-" + string(tc.scope)
			answer := handleAsync(t.Context(), c, hookInput(session, claudecode.EventPermissionRequest, "Bash", `{"command":"git push origin feature"}`, ""), claudecode.Options{})
			e := newPending(t, c, session, "Bash")
			_, err := c.Decide(t.Context(), wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice", Scope: tc.scope})
			require.NoError(t, err)
			got := <-answer
			d := permissionDecision(t, got)
			assert.Equal(t, claudecode.Allow, d.Behavior, string(got))
			if tc.want == "" {
				assert.Empty(t, d.UpdatedPermissions, string(got))
				return
			}
			learned, err := json.Marshal(d.UpdatedPermissions)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(learned))
			if tc.scope == machine.ScopeSession {
				var pretty json.RawMessage = got
				data, err := json.MarshalIndent(pretty, "", "  ")
				require.NoError(t, err)
				golden(t, "PermissionRequest.session", append(data, '\n'))
			}
		})
	}
}

package gate_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// A dry-run replays the calls as people are shown them, masked: a
// candidate's rules cannot probe a secret nobody reads in clear (which
// calls change verdict would tell it), whoever asks.
func TestPolicyDryRun_ReplaysWhatTheReaderMaySee(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default: {requiresApprovalTools: all}\n"})
	ctx := t.Context()
	_, bot := g.ConnectAs(t, "agent")
	_, viewer := g.ConnectAs(t, "viewer")
	_, admin := g.ConnectAs(t, "admin")
	_, err := bot.Submit(ctx, machine.Call{ToolCallID: "1", ToolName: "Bash", ConversationID: "probe",
		Arguments: json.RawMessage(`{"command":"curl -H 'Authorization: Bearer sk-live-abcdefghijklmnopqrstuvwx' https://api.example.com"}`)})
	require.NoError(t, err)
	probe := wire.PolicyDryRunRequest{Document: "default:\n  requiresApprovalTools: all\n  rules: {deny: [\"Bash(*sk-live-a*)\"]}\n"}
	plain := wire.PolicyDryRunRequest{Document: "default:\n  requiresApprovalTools: all\n  rules: {deny: [\"Bash(curl *)\"]}\n"}

	for name, c := range map[string]interface {
		PolicyDryRun(context.Context, wire.PolicyDryRunRequest) (*wire.PolicyDryRunReply, error)
	}{"viewer": viewer, "admin": admin} {
		seen, err := c.PolicyDryRun(ctx, probe)
		require.NoError(t, err, name)
		assert.Equal(t, 1, seen.Calls, name)
		assert.Zero(t, seen.Changed, "%s: the replay sees the token masked: the rule matches nothing", name)
		seen, err = c.PolicyDryRun(ctx, plain)
		require.NoError(t, err, name)
		assert.Equal(t, 1, seen.Changed, "%s: a rule over what is shown matches", name)
	}
}

package gate_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// A dry-run replays the calls as its reader is shown them: a viewer's
// candidate rule cannot probe a secret the viewer sees masked (which calls
// change verdict would tell it), an admin's sees the calls as they are.
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

	seen, err := viewer.PolicyDryRun(ctx, probe)
	require.NoError(t, err)
	assert.Equal(t, 1, seen.Calls)
	assert.Zero(t, seen.Changed, "the viewer's replay sees the token masked: the rule matches nothing")
	all, err := admin.PolicyDryRun(ctx, probe)
	require.NoError(t, err)
	assert.Equal(t, 1, all.Changed, "an admin's replay sees it")
}

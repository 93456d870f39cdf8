package server_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestFlows_ServedThroughTheRequestAPI: a toolgate serving a policy with
// a flow marks the read an agent runs and reports, and holds back the
// agent's next send in the conversation, naming the read.
func TestFlows_ServedThroughTheRequestAPI(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake"}, Policy: `
default:
  requiresApprovalTools: none
  flows: [{after: mcp__mail__read_inbox, then: mcp__mail__send_email, within: 1h}]
`})
	ctx := t.Context()
	_, agent := g.ConnectAs(t, "agent")
	read, err := agent.Submit(ctx, machine.Call{ToolName: "mcp__mail__read_inbox", ConversationID: "A", Arguments: []byte(`{}`)})
	require.NoError(t, err)
	_, err = agent.Started(ctx, read.PendingID, "")
	require.NoError(t, err)
	_, err = agent.Succeed(ctx, read.PendingID, "", []byte(`{"messages":1}`), 0)
	require.NoError(t, err)

	send, err := agent.Submit(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: "A", Arguments: []byte(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, send.Status)
	assert.Contains(t, send.StatusReason, "follows mcp__mail__read_inbox ("+read.PendingID+")")
	other, err := agent.Submit(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: "B", Arguments: []byte(`{}`)})
	require.NoError(t, err)
	assert.NotEqual(t, machine.StatePendingApproval, other.Status, "%s", other.StatusReason)
}

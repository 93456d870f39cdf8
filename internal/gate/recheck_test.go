package gate_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// TestRecheck_ThePolicyInForceDecidesAgain: a call approved under one
// policy is evaluated again under the one in force when it is about to
// run: a deny rule added since matches it, naming the rule. An agent asks
// of its own calls only; an executor of any; nothing is written.
func TestRecheck_ThePolicyInForceDecidesAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	engine, err := policy.NewEngine(&policy.Document{}, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	bot := actor("bot", wire.RoleAgent)
	admin := actor("root", wire.RoleAdmin)
	e, err := g.Submit(ctx, bot, machine.Call{ToolName: "mcp__fs__write", Arguments: json.RawMessage(`{"path":"/etc/hosts"}`), ConversationID: "c"})
	require.NoError(t, err)

	got, err := g.Recheck(ctx, bot, wire.RecheckRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Empty(t, got.Denied, "the policy in force does not deny it")

	_, err = g.SetPolicy(ctx, admin, wire.PolicyDocument{Document: `default: {rules: {deny: ["mcp__fs__write(/etc/**)"]}, matchArgument: {mcp__fs: path}}`})
	require.NoError(t, err)
	got, err = g.Recheck(ctx, bot, wire.RecheckRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, `rules.deny "mcp__fs__write(/etc/**)" (default)`, got.Denied)
	assert.NotZero(t, got.PolicyRevision)
	got, err = g.Recheck(ctx, actor("exec", wire.RoleExecutor), wire.RecheckRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.NotEmpty(t, got.Denied, "an executor asks of any call")

	_, err = g.Recheck(ctx, actor("other", wire.RoleAgent), wire.RecheckRequest{PendingID: e.PendingID})
	require.ErrorIs(t, err, machine.ErrNotFound, "another agent's call is not found")
	_, err = g.Recheck(ctx, actor("viewer", wire.RoleViewer), wire.RecheckRequest{PendingID: e.PendingID})
	require.ErrorIs(t, err, machine.ErrForbidden)
	_, err = g.Recheck(ctx, bot, wire.RecheckRequest{})
	require.ErrorIs(t, err, machine.ErrInvalid)
	after, err := g.Get(ctx, bot, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, e.Status, after.Status, "nothing written")
}

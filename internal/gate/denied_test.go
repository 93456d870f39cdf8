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

// TestDeniedTools_AgentsAskWithoutReadingThePolicy: an agent, which may
// not read the policy, learns which tools it denies outright: no more
// than submitting a call of each would tell it.
func TestDeniedTools_AgentsAskWithoutReadingThePolicy(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	doc, err := policy.Parse([]byte(`default: {rules: {deny: ["mcp__fs__delete", "mcp__fs__write(/etc/**)"]}, matchArgument: {mcp__fs: path}}`))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	bot := actor("bot", wire.RoleAgent)

	_, err = g.Policy(ctx, bot, wire.PolicyGetRequest{})
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent does not read the policy")
	got, err := g.DeniedTools(ctx, bot, wire.DeniedToolsRequest{Tools: []string{"mcp__fs__delete", "mcp__fs__write", "mcp__fs__read"}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"mcp__fs__delete": `rules.deny "mcp__fs__delete" (default)`}, got.Denied)

	_, err = g.DeniedTools(ctx, actor("exec", wire.RoleExecutor), wire.DeniedToolsRequest{Tools: []string{"x"}})
	require.ErrorIs(t, err, machine.ErrForbidden)
	_, err = g.DeniedTools(ctx, gate.Actor{}, wire.DeniedToolsRequest{Tools: []string{"x"}})
	require.ErrorIs(t, err, machine.ErrForbidden)
	_, err = g.DeniedTools(ctx, bot, wire.DeniedToolsRequest{Tools: []string{"not a tool"}})
	require.ErrorIs(t, err, machine.ErrInvalid)
	_, err = g.DeniedTools(ctx, bot, wire.DeniedToolsRequest{Tools: []string{"x"}, PermissionMode: "yolo"})
	require.ErrorIs(t, err, machine.ErrInvalid)
	got, err = g.DeniedTools(ctx, bot, wire.DeniedToolsRequest{Tools: []string{"Bash", "Read"}, PermissionMode: "plan"})
	require.NoError(t, err)
	assert.Contains(t, got.Denied, "Bash")
	assert.NotContains(t, got.Denied, "Read", "a read-only tool runs in plan mode")
}

// TestDeniedTools_NamesToolsWhoseRulesCannotReadTheirArgument: a policy
// that was never validated (built in code, or stored before matchArgument
// was required) with a specifier on a tool whose argument nothing names:
// the reply's Unreadable names the tool and the fix, quoting no rule.
func TestDeniedTools_NamesToolsWhoseRulesCannotReadTheirArgument(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	engine, err := policy.NewEngine(&policy.Document{Default: &policy.Policy{Rules: policy.Rules{
		Deny:  []string{"mcp__files__write_file(/srv/secret/**)"},
		Allow: []string{"mcp__git__status(*)"},
	}}, Teams: map[string]*policy.Policy{"ops": {MatchArgument: map[string]string{"mcp__files": "path", "mcp__git": "repo"}}}}, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	bot := actor("bot", wire.RoleAgent)

	tools := []string{"mcp__files__write_file", "mcp__files__read_file", "mcp__git__status"}
	got, err := g.DeniedTools(t.Context(), bot, wire.DeniedToolsRequest{Tools: tools})
	require.NoError(t, err)
	assert.Empty(t, got.Denied)
	assert.Equal(t, map[string]string{
		"mcp__files__write_file": "the policy has rules on the arguments of mcp__files__write_file but names no argument for them to read, " +
			"so they deny or ask about its calls and allow none: the policy needs matchArgument: {mcp__files__write_file: <argument name>}",
		"mcp__git__status": "the policy has rules on the arguments of mcp__git__status but names no argument for them to read, " +
			"so they deny or ask about its calls and allow none: the policy needs matchArgument: {mcp__git__status: <argument name>}",
	}, got.Unreadable)

	got, err = g.DeniedTools(t.Context(), bot, wire.DeniedToolsRequest{Tools: tools, Team: "ops"})
	require.NoError(t, err)
	assert.Empty(t, got.Unreadable, "the team names the servers' arguments")
	data, err := json.Marshal(got)
	require.NoError(t, err)
	assert.JSONEq(t, `{"denied":{}}`, string(data))
}

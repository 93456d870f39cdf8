package gate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestGrantPreview_IsTheGrantTheApprovalRecords: before granting, an
// approver (or a viewer) sees the tool and the pattern a grant of each
// scope would record, and what bounds it; the preview changes nothing,
// and the approval then records exactly that pattern. A secret in the
// pattern is masked for them as in the arguments; a scope that records
// no grant, a task scope of a call with no task, a call no pattern
// covers alone and an agent asking are refused, naming why.
func TestGrantPreview_IsTheGrantTheApprovalRecords(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleApprover}}
	vic := gate.Actor{Name: "vic", Roles: []wire.Role{wire.RoleViewer}}
	bash := func(id, task, command string) *machine.Entry {
		args, _ := json.Marshal(map[string]string{"command": command})
		e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: id, ToolName: "Bash", Arguments: args, ConversationID: "pv", Team: "platform", TaskID: task})
		require.NoError(t, err)
		return e
	}
	e := bash("1", "t-7", "npm test")

	for scope, want := range map[machine.Scope]wire.GrantPreview{
		machine.ScopeTask:    {ConversationID: "pv", TaskID: "t-7", Team: "platform"},
		machine.ScopeSession: {ConversationID: "pv", Team: "platform"},
		machine.ScopeAlways:  {Team: "platform"},
	} {
		for _, a := range []gate.Actor{alice, vic} {
			p, err := g.GrantPreview(ctx, a, wire.GrantPreviewRequest{PendingID: e.PendingID, Scope: scope})
			require.NoError(t, err, "%s %s", a.Name, scope)
			want.PendingID, want.ToolName, want.Scope, want.Pattern, want.Argument = e.PendingID, "Bash", scope, "Bash(npm test)", "command"
			assert.Equal(t, want, *p, "%s %s", a.Name, scope)
		}
	}
	got, err := g.Get(ctx, gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "a preview decides nothing")
	grants, err := g.Grants(ctx, alice, wire.GrantsRequest{})
	require.NoError(t, err)
	assert.Empty(t, grants, "and grants nothing")

	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: e.PendingID, Approved: true, Scope: machine.ScopeSession})
	require.NoError(t, err)
	grants, err = g.Grants(ctx, alice, wire.GrantsRequest{})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	assert.Equal(t, "Bash(npm test)", grants[0].Pattern, "the pattern previewed is the one recorded")
	assert.Equal(t, "pv", grants[0].ConversationID)

	secret := bash("2", "", "deploy --token=s3cr3tvalue")
	p, err := g.GrantPreview(ctx, alice, wire.GrantPreviewRequest{PendingID: secret.PendingID, Scope: machine.ScopeSession})
	require.NoError(t, err)
	assert.Equal(t, "Bash(deploy --token=[redacted])", p.Pattern, "an approver sees the secret masked")
	p, err = g.GrantPreview(ctx, gate.Actor{Name: "root", Roles: []wire.Role{wire.RoleAdmin}}, wire.GrantPreviewRequest{PendingID: secret.PendingID, Scope: machine.ScopeSession})
	require.NoError(t, err)
	assert.Equal(t, "Bash(deploy --token=[redacted])", p.Pattern, "an admin too: people read the masked view of a call")
	// Granted, the pattern is listed masked for approvers, viewers and
	// admins alike.
	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: secret.PendingID, Approved: true, Scope: machine.ScopeSession})
	require.NoError(t, err)
	listed := func(a gate.Actor) []string {
		grants, err := g.Grants(ctx, a, wire.GrantsRequest{})
		require.NoError(t, err)
		var patterns []string
		for _, gr := range grants {
			patterns = append(patterns, gr.Pattern)
		}
		return patterns
	}
	for _, a := range []gate.Actor{alice, vic, {Name: "root", Roles: []wire.Role{wire.RoleAdmin}}} {
		assert.Equal(t, []string{"Bash(npm test)", "Bash(deploy --token=[redacted])"}, listed(a), a.Name)
	}
	leaky := bash("4", "", "make && deploy --token=s3cr3tvalue")
	_, err = g.GrantPreview(ctx, alice, wire.GrantPreviewRequest{PendingID: leaky.PendingID, Scope: machine.ScopeSession})
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.NotContains(t, err.Error(), "s3cr3tvalue", "nor does a refusal show the secret")

	compound := bash("3", "", "make && rm -rf build")
	for _, c := range []struct {
		a    gate.Actor
		r    wire.GrantPreviewRequest
		err  error
		want string
	}{
		{alice, wire.GrantPreviewRequest{PendingID: e.PendingID, Scope: machine.ScopeOnce}, machine.ErrInvalid, "an approval once records no grant"},
		{alice, wire.GrantPreviewRequest{PendingID: e.PendingID, Scope: "forever"}, machine.ErrInvalid, `scope: must be task, session or always, got "forever"`},
		{alice, wire.GrantPreviewRequest{Scope: machine.ScopeSession}, machine.ErrInvalid, "pendingId: required"},
		{alice, wire.GrantPreviewRequest{PendingID: secret.PendingID, Scope: machine.ScopeTask}, machine.ErrInvalid, "scope task: the call names no task"},
		{alice, wire.GrantPreviewRequest{PendingID: compound.PendingID, Scope: machine.ScopeAlways}, machine.ErrInvalid, "no pattern covers this Bash call alone"},
		{alice, wire.GrantPreviewRequest{PendingID: "pv.nope", Scope: machine.ScopeSession}, machine.ErrNotFound, "pv.nope"},
		{bot, wire.GrantPreviewRequest{PendingID: e.PendingID, Scope: machine.ScopeSession}, machine.ErrForbidden, "may not preview grants"},
	} {
		_, err := g.GrantPreview(ctx, c.a, c.r)
		require.ErrorIs(t, err, c.err, "%+v", c.r)
		assert.Contains(t, err.Error(), c.want)
	}
}

// TestDecideMatching_TheCallsNamed: an inbox's selection decides the
// calls it names, each its own transition: those pending are decided,
// one decided meanwhile is skipped as a conflict naming who decided it,
// an id no call has is skipped as not_found, and the answer accounts for
// every id. A dry run decides nothing; a request naming ids and a match,
// an id twice, or ids with a match's filters is refused.
func TestDecideMatching_TheCallsNamed(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ask := machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Reason: "ask"}, nil
	})
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: ask})
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleApprover}}
	bob := gate.Actor{Name: "bob", Roles: []wire.Role{wire.RoleApprover}}
	var ids []string
	for _, id := range []string{"a", "b", "c", "d"} {
		e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: id, ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "sel"})
		require.NoError(t, err)
		ids = append(ids, e.PendingID)
	}
	_, err := g.Decide(ctx, bob, wire.DecideRequest{PendingID: ids[1], Approved: false, Reason: "not this one"})
	require.NoError(t, err)
	named := []string{ids[0], ids[1], "sel.gone", ids[2]}

	dry, err := g.DecideMatching(ctx, alice, wire.DecideMatchingRequest{IDs: named, Approved: true, DryRun: true})
	require.NoError(t, err)
	assert.Len(t, dry.Decided, 2)
	assert.Len(t, dry.Skipped, 2)
	for _, id := range []string{ids[0], ids[2]} {
		got, err := g.Get(ctx, alice, wire.GetRequest{PendingID: id})
		require.NoError(t, err)
		assert.Equal(t, machine.StatePendingApproval, got.Status, "a dry run decides nothing")
	}

	reply, err := g.DecideMatching(ctx, alice, wire.DecideMatchingRequest{IDs: named, Approved: true, Reason: "selected"})
	require.NoError(t, err)
	decided := map[string]wire.MatchedCall{}
	for _, m := range reply.Decided {
		decided[m.PendingID] = m
		assert.Equal(t, machine.StateApproved, m.Entry.Status)
		assert.Equal(t, "alice", m.Entry.ApprovedOrRejectedByUserID)
	}
	assert.ElementsMatch(t, []string{ids[0], ids[2]}, []string{reply.Decided[0].PendingID, reply.Decided[1].PendingID})
	skipped := map[string]wire.MatchedCall{}
	for _, m := range reply.Skipped {
		skipped[m.PendingID] = m
	}
	require.Len(t, skipped, 2, "%+v", reply.Skipped)
	assert.Equal(t, "conflict", skipped[ids[1]].Code)
	assert.Contains(t, skipped[ids[1]].Reason, "bob")
	assert.Equal(t, machine.StateRejectedByUser, skipped[ids[1]].Entry.Status)
	assert.Equal(t, "not_found", skipped["sel.gone"].Code)
	assert.Nil(t, skipped["sel.gone"].Entry)
	got, err := g.Get(ctx, alice, wire.GetRequest{PendingID: ids[3]})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "a call not named is not decided")

	for _, c := range []struct {
		r    wire.DecideMatchingRequest
		want string
	}{
		{wire.DecideMatchingRequest{Approved: true}, "match or ids: one is required"},
		{wire.DecideMatchingRequest{IDs: []string{ids[3]}, Match: "web_search"}, "match and ids: give one, not both"},
		{wire.DecideMatchingRequest{IDs: []string{ids[3], ids[3]}}, `ids[1]: "sel.d" is ids[0] again`},
		{wire.DecideMatchingRequest{IDs: []string{ids[3], ""}}, "ids[1]: empty"},
		{wire.DecideMatchingRequest{IDs: []string{ids[3]}, ConversationID: "sel"}, "conversationId, team and callerBotId narrow a match only"},
	} {
		_, err := g.DecideMatching(ctx, alice, c.r)
		require.ErrorIs(t, err, machine.ErrInvalid, "%+v", c.r)
		assert.Contains(t, err.Error(), c.want)
	}
	_, err = g.DecideMatching(ctx, bot, wire.DecideMatchingRequest{IDs: []string{ids[3]}, Approved: true})
	assert.ErrorIs(t, err, machine.ErrForbidden, "an agent decides nothing")
}

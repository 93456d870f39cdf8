package gate_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// authzenPolicy runs reads, asks about deploys and denies deleting prod.
const authzenPolicy = `
default:
  requiresApprovalTools: [deploy, delete]
  readOnlyTools: [read]
  matchArgument: {delete: target, deploy: env}
  rules: {deny: ["delete(prod)"]}
  toolSpecificDelays: {backup: 3600000}
`

// evaluation is an access evaluation of tool with args as bot, the
// resource's id the call's id.
func evaluation(bot, id, tool, args string) wire.AccessEvaluationRequest {
	props, _ := json.Marshal(map[string]any{"arguments": json.RawMessage(args), "conversationId": "conv"})
	return wire.AccessEvaluationRequest{
		Subject:  &wire.AuthZENSubject{Type: "agent", ID: bot},
		Action:   &wire.AuthZENAction{Name: tool},
		Resource: &wire.AuthZENResource{Type: wire.AuthZENToolCall, ID: id, Properties: props},
	}
}

func newAuthzenGate(t *testing.T) (*gate.Service, gate.Actor) {
	t.Helper()
	env := bustest.Start(t, bustest.Topologies[0])
	doc, err := policy.Parse([]byte(authzenPolicy))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	_, err = g.SetPolicy(t.Context(), actor("root", wire.RoleAdmin), wire.PolicyDocument{Document: authzenPolicy})
	require.NoError(t, err)
	return g, actor("bot", wire.RoleAgent)
}

// TestEvaluate_TrueOnlyForACallToolgateRunsNow: the "done when":
// an allowed call is true, and handed to its caller (claimed in its name,
// so nothing else runs it); a denied one false saying why; an asked one
// false with its pending call, its deadline and its binding in the
// context; once approved, the same evaluation is true once, and false for
// other arguments, under its id or a new one.
func TestEvaluate_TrueOnlyForACallToolgateRunsNow(t *testing.T) {
	t.Parallel()
	g, bot := newAuthzenGate(t)
	ctx := t.Context()
	alice := actor("alice", wire.RoleApprover)

	d, err := g.Evaluate(ctx, bot, evaluation("bot", "r1", "read", `{"path":"/a"}`))
	require.NoError(t, err)
	require.True(t, d.Decision, "%+v", d.Context)
	assert.Equal(t, wire.AccessAllowed, d.Context.Reason)
	assert.Equal(t, "readOnlyTools (default)", d.Context.Message, "what let it run")
	assert.Equal(t, "conv.r1", d.Context.PendingID)
	assert.NotEmpty(t, d.Context.ExpiresAt, "the end of the caller's lease")
	e, err := g.Get(ctx, bot, wire.GetRequest{PendingID: "conv.r1"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateExecuting, e.Status)
	assert.Equal(t, "bot", e.Lease.Holder, "handed to the caller")
	d, err = g.Evaluate(ctx, bot, evaluation("bot", "r1", "read", `{"path":"/a"}`))
	require.NoError(t, err)
	assert.False(t, d.Decision, "once")
	assert.Equal(t, wire.AccessConsumed, d.Context.Reason)

	d, err = g.Evaluate(ctx, bot, evaluation("bot", "x1", "delete", `{"target":"prod"}`))
	require.NoError(t, err)
	assert.False(t, d.Decision)
	assert.Equal(t, wire.AccessPolicyDenied, d.Context.Reason)
	assert.Equal(t, `rules.deny "delete(prod)" (default)`, d.Context.Message)

	asked := evaluation("bot", "d1", "deploy", `{"env":"staging"}`)
	d, err = g.Evaluate(ctx, bot, asked)
	require.NoError(t, err)
	assert.False(t, d.Decision)
	assert.Equal(t, wire.AccessApprovalRequired, d.Context.Reason)
	assert.Equal(t, "conv.d1", d.Context.PendingID)
	assert.Equal(t, machine.StatePendingApproval, d.Context.Status)
	assert.NotEmpty(t, d.Context.ExpiresAt, "its approval deadline")
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{"env":"staging"}`)), d.Context.Binding.ArgumentsDigest)
	assert.Equal(t, wire.EntrySubject("bot", "conv.d1"), d.Context.Follow.Subject)
	d, err = g.Evaluate(ctx, bot, asked)
	require.NoError(t, err)
	assert.Equal(t, wire.AccessApprovalRequired, d.Context.Reason, "asked again: the same pending call")

	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: "conv.d1", Approved: true, Reason: "staging is fine"})
	require.NoError(t, err)
	d, err = g.Evaluate(ctx, bot, evaluation("bot", "d1", "deploy", `{"env":"prod"}`))
	require.NoError(t, err)
	assert.False(t, d.Decision, "other arguments under the approved call's id")
	assert.Equal(t, wire.AccessOtherCall, d.Context.Reason)
	d, err = g.Evaluate(ctx, bot, evaluation("bot", "d2", "deploy", `{"env":"prod"}`))
	require.NoError(t, err)
	assert.False(t, d.Decision, "other arguments as a new call")
	assert.Equal(t, wire.AccessApprovalRequired, d.Context.Reason)
	d, err = g.Evaluate(ctx, bot, asked)
	require.NoError(t, err)
	require.True(t, d.Decision, "%+v", d.Context)
	assert.Equal(t, wire.AccessApproved, d.Context.Reason)
	assert.Equal(t, "alice", d.Context.DecidedBy)
	assert.Equal(t, "staging is fine", d.Context.Message)
	d, err = g.Evaluate(ctx, bot, asked)
	require.NoError(t, err)
	assert.False(t, d.Decision, "an approval is good once")
	assert.Equal(t, wire.AccessConsumed, d.Context.Reason)

	d, err = g.Evaluate(ctx, bot, evaluation("bot", "b1", "backup", `{}`))
	require.NoError(t, err)
	assert.False(t, d.Decision, "the policy runs it in an hour, not now")
	assert.Equal(t, wire.AccessScheduled, d.Context.Reason)
	assert.NotEmpty(t, d.Context.NotBefore)
}

// TestEvaluate_AnApprovalBindsToItsArgumentsAndThePolicyInForce: an
// approval that edited the arguments is not one of the arguments asked
// about; one the policy in force now denies is not handed out.
func TestEvaluate_AnApprovalBindsToItsArgumentsAndThePolicyInForce(t *testing.T) {
	t.Parallel()
	g, bot := newAuthzenGate(t)
	ctx := t.Context()
	alice := actor("alice", wire.RoleApprover)

	edited := evaluation("bot", "e1", "deploy", `{"env":"staging"}`)
	_, err := g.Evaluate(ctx, bot, edited)
	require.NoError(t, err)
	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: "conv.e1", Approved: true, Arguments: json.RawMessage(`{"env":"qa"}`)})
	require.NoError(t, err)
	d, err := g.Evaluate(ctx, bot, edited)
	require.NoError(t, err)
	assert.False(t, d.Decision)
	assert.Equal(t, wire.AccessEdited, d.Context.Reason)
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{"env":"qa"}`)), d.Context.Binding.ArgumentsDigest, "what the approval binds to")

	later := evaluation("bot", "e2", "deploy", `{"env":"prod"}`)
	_, err = g.Evaluate(ctx, bot, later)
	require.NoError(t, err)
	_, err = g.Decide(ctx, alice, wire.DecideRequest{PendingID: "conv.e2", Approved: true})
	require.NoError(t, err)
	_, err = g.SetPolicy(ctx, actor("root", wire.RoleAdmin), wire.PolicyDocument{Document: strings.Replace(authzenPolicy, `"delete(prod)"`, `"delete(prod)", "deploy(prod)"`, 1)})
	require.NoError(t, err)
	d, err = g.Evaluate(ctx, bot, later)
	require.NoError(t, err)
	assert.False(t, d.Decision)
	assert.Equal(t, wire.AccessPolicyDenied, d.Context.Reason)
	assert.Contains(t, d.Context.Message, `now denies it: rules.deny "deploy(prod)"`)
	e, err := g.Get(ctx, bot, wire.GetRequest{PendingID: "conv.e2"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, e.Status, "not handed out")
}

// TestEvaluate_OnlyAnAgentAsItself: the subject is the caller's own
// name (an admin may name any agent); a request lacking what the
// specification requires is invalid; what toolgate cannot decide is
// false, saying why.
func TestEvaluate_OnlyAnAgentAsItself(t *testing.T) {
	t.Parallel()
	g, bot := newAuthzenGate(t)
	ctx := t.Context()

	_, err := g.Evaluate(ctx, bot, evaluation("other", "s1", "read", `{}`))
	assert.ErrorIs(t, err, machine.ErrForbidden)
	_, err = g.Evaluate(ctx, actor("vic", wire.RoleViewer), evaluation("vic", "s1", "read", `{}`))
	assert.ErrorIs(t, err, machine.ErrForbidden)
	d, err := g.Evaluate(ctx, actor("root", wire.RoleAdmin), evaluation("other", "s2", "read", `{}`))
	require.NoError(t, err)
	assert.True(t, d.Decision, "an admin evaluates as any agent")

	for name, r := range map[string]func(*wire.AccessEvaluationRequest){
		"subject":       func(r *wire.AccessEvaluationRequest) { r.Subject = nil },
		"subject.type":  func(r *wire.AccessEvaluationRequest) { r.Subject.Type = "" },
		"action.name":   func(r *wire.AccessEvaluationRequest) { r.Action.Name = "" },
		"resource":      func(r *wire.AccessEvaluationRequest) { r.Resource = nil },
		"resource.id":   func(r *wire.AccessEvaluationRequest) { r.Resource.ID = "" },
		"resource.type": func(r *wire.AccessEvaluationRequest) { r.Resource.Type = "" },
	} {
		req := evaluation("bot", "s3", "read", `{}`)
		r(&req)
		_, err := g.Evaluate(ctx, bot, req)
		assert.ErrorIs(t, err, machine.ErrInvalid, name)
		assert.ErrorContains(t, err, name+": required")
	}

	for name, req := range map[string]wire.AccessEvaluationRequest{
		"a resource that is not a call": {Subject: &wire.AuthZENSubject{Type: "agent", ID: "bot"}, Action: &wire.AuthZENAction{Name: "read"},
			Resource: &wire.AuthZENResource{Type: "document", ID: "1"}},
		"arguments that are not an object": evaluation("bot", "s4", "read", `[1]`),
		"a tool name toolgate refuses":     evaluation("bot", "s5", "no spaces", `{}`),
	} {
		d, err := g.Evaluate(ctx, bot, req)
		require.NoError(t, err, name)
		assert.False(t, d.Decision, name)
		assert.Equal(t, wire.AccessUndecided, d.Context.Reason, name)
		assert.Equal(t, 400, d.Context.Error.Status, "%s: %s", name, d.Context.Error.Message)
	}
}

// TestEvaluations_DefaultsAndSemantics: a batch's evaluations take the
// request's subject, action, resource and context where they name none,
// and its semantics stop at the first deny or permit; a batch with an
// evaluation Evaluate refuses is refused whole, before any is evaluated.
func TestEvaluations_DefaultsAndSemantics(t *testing.T) {
	t.Parallel()
	g, bot := newAuthzenGate(t)
	ctx := t.Context()
	base := evaluation("bot", "", "read", `{}`)
	call := func(id, tool string) wire.AccessEvaluationRequest {
		return wire.AccessEvaluationRequest{Action: &wire.AuthZENAction{Name: tool}, Resource: &wire.AuthZENResource{Type: wire.AuthZENToolCall, ID: id}}
	}
	batch := func(semantic string, evals ...wire.AccessEvaluationRequest) []bool {
		t.Helper()
		r := wire.AccessEvaluationsRequest{AccessEvaluationRequest: wire.AccessEvaluationRequest{Subject: base.Subject}, Evaluations: evals}
		if semantic != "" {
			r.Options = &wire.AccessEvaluationsOptions{EvaluationsSemantic: semantic}
		}
		reply, err := g.Evaluations(ctx, bot, r)
		require.NoError(t, err)
		assert.Nil(t, reply.Decision)
		var got []bool
		for _, d := range reply.Evaluations {
			got = append(got, d.Decision)
		}
		return got
	}
	assert.Equal(t, []bool{true, false, true}, batch("", call("a1", "read"), call("a2", "deploy"), call("a3", "read")))
	assert.Equal(t, []bool{true, false}, batch(wire.DenyOnFirstDeny, call("b1", "read"), call("b2", "deploy"), call("b3", "read")))
	assert.Equal(t, []bool{false, true}, batch(wire.PermitOnFirstPermit, call("c1", "deploy"), call("c2", "read"), call("c3", "read")))
	_, err := g.Get(ctx, bot, wire.GetRequest{PendingID: "authzen.c3"})
	assert.ErrorIs(t, err, machine.ErrNotFound, "not evaluated: no properties, the default conversation")

	reply, err := g.Evaluations(ctx, bot, wire.AccessEvaluationsRequest{AccessEvaluationRequest: evaluation("bot", "d1", "read", `{}`)})
	require.NoError(t, err)
	require.NotNil(t, reply.Decision, "no evaluations: the one of the defaults")
	assert.True(t, *reply.Decision)
	assert.Empty(t, reply.Evaluations)

	_, err = g.Evaluations(ctx, bot, wire.AccessEvaluationsRequest{
		AccessEvaluationRequest: wire.AccessEvaluationRequest{Action: base.Action},
		Evaluations:             []wire.AccessEvaluationRequest{evaluation("bot", "e1", "read", `{}`), {Resource: base.Resource}},
	})
	assert.ErrorIs(t, err, machine.ErrInvalid)
	assert.ErrorContains(t, err, "evaluations[1]: invalid: subject: required")
	_, err = g.Evaluations(ctx, bot, wire.AccessEvaluationsRequest{Evaluations: []wire.AccessEvaluationRequest{evaluation("bot", "e2", "read", `{}`), evaluation("other", "e3", "read", `{}`)}})
	assert.ErrorIs(t, err, machine.ErrForbidden)
	_, err = g.Get(ctx, bot, wire.GetRequest{PendingID: "conv.e2"})
	assert.ErrorIs(t, err, machine.ErrNotFound, "a refused batch evaluates nothing")
	_, err = g.Evaluations(ctx, bot, wire.AccessEvaluationsRequest{Evaluations: []wire.AccessEvaluationRequest{evaluation("bot", "e4", "read", `{}`)},
		Options: &wire.AccessEvaluationsOptions{EvaluationsSemantic: "any"}})
	assert.ErrorIs(t, err, machine.ErrInvalid)
}

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

const reviewPolicy = `
default:
  requiresApprovalTools: all
  approvers: [alice, bob]
  risk: {"Bash(git status --ignored*)": high}
  quorum: {"Bash(git status --porcelain*)": {required: 2}}
  reviewers:
    - name: bot
      match: [Bash, WebFetch]
      nats: reviewers.bot
      mayApprove: ["Bash(git status*)"]
`

// TestReview_ANarrowingReviewer: only toolgate's reviewer role answers
// for a reviewer, and only for calls its match covers; it sees the call
// masked with the conversation's other calls; its approval of a call its
// mayApprove covers decides it as reviewer:bot, while one beyond its
// reach (outside mayApprove, a high risk, a quorum, a deny rule added
// since the call was asked) is refused, recorded, and left to humans;
// its rejection and escalation are its own.
func TestReview_ANarrowingReviewer(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	doc, err := policy.Parse([]byte(reviewPolicy))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	n := 0
	ask := func(tool string, args map[string]any) *machine.Entry {
		t.Helper()
		n++
		raw, _ := json.Marshal(args)
		e, err := g.Submit(ctx, gate.System, machine.Call{ToolCallID: "c" + string(rune('a'+n)), ToolName: tool, Arguments: raw, CallerBotID: "agent-1", ConversationID: "conv"})
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, e.Status, tool)
		return e
	}
	review := func(e *machine.Entry, decision string) (*wire.ReviewReply, error) {
		return g.Review(ctx, gate.Reviewer, wire.ReviewDecision{PendingID: e.PendingID, Reviewer: "bot", Answer: wire.ReviewAnswer{Decision: decision, Reason: "rule of thumb"}})
	}

	status := ask("Bash", map[string]any{"command": "git status", "token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"})
	// Nobody else answers for a reviewer, an admin or an agent included.
	for _, a := range []gate.Actor{actor("agent-1", wire.RoleAgent), actor("root", wire.RoleAdmin), {}} {
		_, err := g.Review(ctx, a, wire.ReviewDecision{PendingID: status.PendingID, Reviewer: "bot", Answer: wire.ReviewAnswer{Decision: "approve"}})
		assert.ErrorIs(t, err, machine.ErrForbidden, a.Name)
		_, err = g.ReviewCall(ctx, a, wire.ReviewCallRequest{PendingID: status.PendingID, Reviewer: "bot"})
		assert.ErrorIs(t, err, machine.ErrForbidden, a.Name)
	}
	_, err = g.Review(ctx, gate.Reviewer, wire.ReviewDecision{PendingID: status.PendingID, Reviewer: "other", Answer: wire.ReviewAnswer{Decision: "approve"}})
	assert.ErrorIs(t, err, gate.ErrNotReviewed, "a reviewer the policy does not name")
	write := ask("Write", map[string]any{"file_path": "/tmp/x"})
	_, err = review(write, "reject")
	assert.ErrorIs(t, err, gate.ErrNotReviewed, "a call its match does not cover")
	_, err = g.Review(ctx, gate.Reviewer, wire.ReviewDecision{PendingID: status.PendingID, Reviewer: "bot", Answer: wire.ReviewAnswer{Decision: "yes"}})
	assert.ErrorIs(t, err, machine.ErrInvalid)

	sent, err := g.ReviewCall(ctx, gate.Reviewer, wire.ReviewCallRequest{PendingID: status.PendingID, Reviewer: "bot"})
	require.NoError(t, err)
	assert.NotContains(t, string(sent.Call.ToolArguments), "ghp_", "the call is masked as an approver sees it")
	require.Len(t, sent.Recent, 1, "the conversation's other calls")
	assert.Equal(t, write.PendingID, sent.Recent[0].PendingID)

	got, err := review(status, "approve")
	require.NoError(t, err)
	assert.Equal(t, wire.ReviewApproved, got.Outcome)
	assert.Equal(t, machine.StateApproved, got.Entry.Status)
	assert.Equal(t, machine.DecidedByReviewer, got.Entry.DecidedBy)
	assert.Equal(t, "reviewer:bot", got.Entry.ApprovedOrRejectedByUserID)
	_, err = review(status, "reject")
	assert.ErrorIs(t, err, machine.ErrConflict, "a call no longer pending")

	for _, refused := range []*machine.Entry{
		ask("Bash", map[string]any{"command": "git diff"}),                   // outside mayApprove
		ask("Bash", map[string]any{"command": "git status && rm -rf /"}),     // every command must be covered
		ask("Bash", map[string]any{"command": "git status --ignored"}),       // high risk
		ask("Bash", map[string]any{"command": "git status --porcelain"}),     // a quorum
		ask("WebFetch", map[string]any{"url": "https://docs.python.org/3/"}), // outside mayApprove
	} {
		got, err := review(refused, "approve")
		require.NoError(t, err)
		assert.Equal(t, wire.ReviewRefused, got.Outcome, refused.ToolArguments)
		assert.Equal(t, machine.StatePendingApproval, got.Entry.Status, "left to humans")
		require.Len(t, got.Entry.Reviews, 1)
		assert.Equal(t, got.Refused, got.Entry.Reviews[0].Refused)
		assert.Equal(t, machine.EventReview, got.Entry.LastTransition.Event)
	}

	// A deny rule added after the call was asked covers it: refused.
	late := ask("Bash", map[string]any{"command": "git status -- secrets/"})
	denied, err := policy.Parse([]byte(reviewPolicy + "  rules: {deny: [\"Bash(git status -- secrets/*)\"]}\n"))
	require.NoError(t, err)
	require.NoError(t, engine.SetDocument(denied))
	got, err = review(late, "approve")
	require.NoError(t, err)
	assert.Equal(t, wire.ReviewRefused, got.Outcome)
	assert.Contains(t, got.Refused, "the policy denies it")

	esc := ask("Bash", map[string]any{"command": "cat .env"})
	got, err = g.Review(ctx, gate.Reviewer, wire.ReviewDecision{PendingID: esc.PendingID, Reviewer: "bot", Answer: wire.ReviewAnswer{Decision: "escalate", Lean: "reject", Reason: "touches .env"}})
	require.NoError(t, err)
	assert.Equal(t, wire.ReviewEscalated, got.Outcome)
	assert.Equal(t, "reviewer:bot", got.Entry.LastTransition.Actor)
	assert.Equal(t, machine.StatePendingApproval, got.Entry.Status)
	got, err = review(esc, "abstain")
	require.NoError(t, err)
	assert.Equal(t, wire.ReviewAbstained, got.Outcome)
	got, err = review(esc, "reject")
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, got.Entry.Status)
	assert.Equal(t, machine.DecidedByReviewer, got.Entry.DecidedBy)
	assert.Len(t, got.Entry.Reviews, 1, "the escalation before stays on record")
}

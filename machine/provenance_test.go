package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// TestDecidedBy_EveryDecisionRecordsWhatDecided: the policy's verdict at
// submit records the kind of thing that decided (a rule, a grant, the
// policy's other settings by default), an approval a human, the one that
// completes a quorum the quorum, a timeout the timeout, and a decision an
// agent's classifier or channel made says so; each decision's receipt
// carries it, signed, and other transitions record none.
func TestDecidedBy_EveryDecisionRecordsWhatDecided(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	submitted := func(v machine.Verdict, id string) *machine.Entry {
		t.Helper()
		e, err := machine.New(env.Store, machine.WithSigner(s), verdict(v)).Submit(ctx, call("decided-by", id))
		require.NoError(t, err)
		return e
	}
	assert.Equal(t, machine.DecidedByRule, submitted(machine.Verdict{Action: machine.ActionDeny, DecidedBy: machine.DecidedByRule}, "rule").LastTransition.DecidedBy)
	assert.Equal(t, machine.DecidedByGrant, submitted(machine.Verdict{Action: machine.ActionRun, DecidedBy: machine.DecidedByGrant}, "grant").LastTransition.DecidedBy)
	ran := submitted(machine.Verdict{Action: machine.ActionRun}, "policy")
	assert.Equal(t, machine.DecidedByPolicy, ran.LastTransition.DecidedBy, "the policy's settings, when the verdict names nothing else")

	m := machine.New(env.Store, machine.WithSigner(s))
	claimed, err := m.Claim(ctx, ran.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	assert.Empty(t, claimed.LastTransition.DecidedBy, "a claim decides nothing")

	ask := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}
	approved, err := m.Decide(ctx, submitted(ask, "human").PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	assert.Equal(t, machine.DecidedByHuman, approved.LastTransition.DecidedBy)
	denied, err := m.Decide(ctx, submitted(ask, "classifier").PendingID, machine.Decision{By: "claude-code", DecidedBy: machine.DecidedByClassifier})
	require.NoError(t, err)
	assert.Equal(t, machine.DecidedByClassifier, denied.LastTransition.DecidedBy)
	_, err = m.Decide(ctx, submitted(ask, "forged").PendingID, machine.Decision{Approve: true, By: "alice", DecidedBy: machine.DecidedByTimeout})
	assert.ErrorIs(t, err, machine.ErrInvalid, "only a human, a classifier or a channel decides through Decide")

	quorum := ask
	quorum.Quorum = &machine.Quorum{Required: 2}
	q := submitted(quorum, "quorum")
	voted, err := m.Decide(ctx, q.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	assert.Equal(t, machine.EventVote, voted.LastTransition.Event)
	assert.Empty(t, voted.LastTransition.DecidedBy, "a vote short of the quorum decides nothing yet")
	done, err := m.Decide(ctx, q.PendingID, machine.Decision{Approve: true, By: "bob"})
	require.NoError(t, err)
	assert.Equal(t, machine.DecidedByQuorum, done.LastTransition.DecidedBy)

	timeout := machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute, AutoRejectOnTimeout: true}
	late := machine.New(env.Store, machine.WithSigner(s), machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	expired, err := late.Expire(ctx, submitted(timeout, "timeout").PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByTimeout, expired.Status)
	assert.Equal(t, machine.DecidedByTimeout, expired.LastTransition.DecidedBy)

	// The entry names its latest decision's, past the transitions after.
	assert.Equal(t, machine.DecidedByPolicy, claimed.DecidedBy, "the claim keeps the policy's")
	for _, e := range []*machine.Entry{approved, denied, done, expired} {
		assert.Equal(t, e.LastTransition.DecidedBy, e.DecidedBy, e.PendingID)
	}

	// Each decision's receipt carries what decided, under the signature.
	for _, e := range []*machine.Entry{approved, done, expired} {
		last := e.Receipts[len(e.Receipts)-1]
		assert.Equal(t, e.LastTransition.DecidedBy, last.DecidedBy, e.PendingID)
		assert.Equal(t, machine.DecidedByPolicy, e.Receipts[0].DecidedBy, "%s: the policy asked", e.PendingID)
		_, err := machine.VerifyReceipts(clone(t, e), machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
		require.NoError(t, err, e.PendingID)
		forged := clone(t, e)
		forged.Receipts[len(forged.Receipts)-1].DecidedBy = machine.DecidedByRule
		_, err = machine.VerifyReceipts(forged, machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
		assert.Error(t, err, "%s: what decided is signed", e.PendingID)
	}
}

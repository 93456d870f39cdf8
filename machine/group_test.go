package machine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// An approver list's group:NAME admits whoever's sign-in puts them in
// NAME, and the decision records the group on its transition, its
// receipt and the entry; a name listed outright says more than a group.
func TestGroups_AGroupEntryAdmitsItsMembers(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	m := machine.New(env.Store, machine.WithSigner(s), verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour,
		Approvers: []string{"carol", "group:payments-leads"}}))
	check := machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}}

	e, err := m.Submit(ctx, call("groups", "1"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob", Groups: []string{"staff", "payments"}})
	require.ErrorIs(t, err, machine.ErrForbidden, "in no group the list names")
	assert.ErrorContains(t, err, "bob is not among this call's approvers [carol group:payments-leads], nor in a group they name")
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "payments-leads"})
	require.ErrorIs(t, err, machine.ErrForbidden, "a user named as the group is not in it")

	alice := &machine.Identity{Issuer: "https://id.example.com", Subject: "5f0c1a"}
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Identity: alice, Groups: []string{"staff", "payments-leads"}})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Equal(t, "payments-leads", got.LastTransition.ViaGroup)
	assert.Equal(t, "payments-leads", got.DeciderViaGroup)
	last := got.Receipts[len(got.Receipts)-1]
	assert.Equal(t, "payments-leads", last.ViaGroup, "the signed receipt names the group")
	assert.Equal(t, alice, last.Identity)
	_, err = machine.VerifyReceipts(got, check)
	require.NoError(t, err)
	forged := clone(t, got)
	forged.DeciderViaGroup = "sre"
	_, err = machine.VerifyReceipts(forged, check)
	assert.ErrorContains(t, err, `deciderViaGroup is "sre", but receipt 2 (approve by alice at`)
	forged = clone(t, got)
	forged.Receipts[1].ViaGroup = "sre"
	_, err = machine.VerifyReceipts(forged, check)
	assert.ErrorContains(t, err, "signature does not verify", "the group is signed")

	named, err := m.Submit(ctx, call("groups", "2"))
	require.NoError(t, err)
	got, err = m.Decide(ctx, named.PendingID, machine.Decision{Approve: false, By: "carol", Groups: []string{"payments-leads"}})
	require.NoError(t, err)
	assert.Empty(t, got.DeciderViaGroup, "carol is named: no group entitled her")
	assert.Empty(t, got.LastTransition.ViaGroup)
}

// A quorum counts distinct people, whatever groups they are in or are
// listed by: one person named and in a listed group counts once; each
// vote records the group that let it count.
func TestGroups_AQuorumCountsPeopleNotGroups(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	m := machine.New(env.Store, machine.WithSigner(s), verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour,
		Quorum: &machine.Quorum{Required: 2, Of: []string{"alice", "group:sre", "group:payments-leads"}}}))
	e, err := m.Submit(ctx, call("groups-quorum", "1"))
	require.NoError(t, err)

	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Groups: []string{"sre", "payments-leads"}})
	require.NoError(t, err)
	assert.Equal(t, machine.EventVote, got.LastTransition.Event)
	assert.Empty(t, got.Votes[0].ViaGroup, "alice is named")
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Groups: []string{"sre"}})
	require.ErrorIs(t, err, machine.ErrConflict, "alice counts once, in however many groups")

	got, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "dave", Groups: []string{"payments-leads", "sre"}})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status, "two people: the quorum is met")
	assert.Equal(t, "sre", got.DeciderViaGroup, "the first group the list names that dave is in")
	assert.Equal(t, []machine.Vote{{By: "alice", Approve: true, At: got.Votes[0].At}, {By: "dave", Approve: true, At: got.Votes[1].At, ViaGroup: "sre"}}, got.Votes)
	_, err = machine.VerifyReceipts(got, machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
	require.NoError(t, err)

	// A vote a group let count reads so.
	second, err := m.Submit(ctx, call("groups-quorum", "2"))
	require.NoError(t, err)
	got, err = m.Decide(ctx, second.PendingID, machine.Decision{Approve: true, By: "erin", Groups: []string{"payments-leads"}})
	require.NoError(t, err)
	assert.Equal(t, "approved by erin (group:payments-leads): 1 of 2 approvals; still needed: one of alice, group:sre, group:payments-leads", got.LastTransition.Reason)
	assert.Equal(t, "payments-leads", got.Votes[0].ViaGroup)
	forged := clone(t, got)
	forged.Votes[0].ViaGroup = "sre"
	_, err = machine.VerifyReceipts(forged, machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
	assert.ErrorContains(t, err, "erin approved at", "a vote's group is the receipt's")
}

// Under rejectWhen majority, the majority is of the people named: a
// group an escalation tier adds lets its members decide without changing
// the count.
func TestGroups_AMajorityCountsTheNamed(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour,
		Quorum:   &machine.Quorum{Required: 2, Of: []string{"alice", "bob", "carol"}, RejectWhen: machine.RejectMajority},
		Escalate: []machine.EscalationTier{{After: 0, To: []string{"group:sre"}}}}))
	e, err := m.Submit(ctx, call("groups-majority", "1"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "oscar", Groups: []string{"sre"}})
	require.ErrorIs(t, err, machine.ErrForbidden, "not before the tier is reached")
	_, err = m.Escalate(ctx, e.PendingID)
	require.NoError(t, err)
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "oscar", Groups: []string{"sre"}})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "one no of three named")
	got, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "alice"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, got.Status, "two of three named")
}

// An edit the policy would ask a group's members about may be approved
// by one of them, as by an approver it names.
func TestGroups_AnEditsApproversAdmitGroups(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, machine.WithEvaluator(dryPolicy{
		v: machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour},
		dry: func(machine.Call) machine.Verdict {
			return machine.Verdict{Action: machine.ActionAsk, Approvers: []string{"group:leads"}, Reason: "leads"}
		},
	}))
	e, err := m.Submit(ctx, call("groups-edit", "1"))
	require.NoError(t, err)
	edited := json.RawMessage(`{"query":"nats jetstream"}`)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob", Groups: []string{"staff"}, Arguments: edited})
	require.ErrorIs(t, err, machine.ErrForbidden)
	assert.ErrorContains(t, err, "the edited call may be approved only by one of [group:leads], not bob")
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Groups: []string{"leads"}, Arguments: edited})
	require.NoError(t, err)
	assert.JSONEq(t, string(edited), string(got.ToolArguments))
}

// A call whose outcome is unknown is run again by anyone its approvers'
// groups admit, and the new call records the group.
func TestGroups_ARerunByAGroupsMember(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, Approvers: []string{"group:leads"}, ApprovalTimeout: time.Hour}))
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	e, err := m.Submit(ctx, call("groups-rerun", "c1"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Groups: []string{"leads"}})
	require.NoError(t, err)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	_, err = later.AbandonLease(ctx, e.PendingID)
	require.NoError(t, err)

	_, err = m.Rerun(ctx, e.PendingID, machine.RerunRequest{By: "bob", Groups: []string{"staff"}})
	require.ErrorIs(t, err, machine.ErrForbidden)
	again, err := m.Rerun(ctx, e.PendingID, machine.RerunRequest{By: "erin", Groups: []string{"leads"}})
	require.NoError(t, err)
	assert.Equal(t, "erin", again.LastTransition.Actor)
	assert.Equal(t, "leads", again.LastTransition.ViaGroup)
	assert.Equal(t, "leads", again.DeciderViaGroup)
}

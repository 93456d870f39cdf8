package machine_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// testSigner is a raw Ed25519 key whose public key is "ed25519:" and its
// base64url (toolgate's own are nkeys, which the machine does not know).
type testSigner struct{ priv ed25519.PrivateKey }

func newTestSigner(t *testing.T) testSigner {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return testSigner{priv}
}

func (s testSigner) PublicKey() string {
	return "ed25519:" + base64.RawURLEncoding.EncodeToString(s.priv.Public().(ed25519.PublicKey))
}

func (s testSigner) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.priv, msg), nil }

func verifyTest(key string, msg, sig []byte) bool {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, "ed25519:"))
	return err == nil && len(raw) == ed25519.PublicKeySize && ed25519.Verify(raw, msg, sig)
}

// resign signs r again with s, as someone holding a key would after
// changing it.
func resign(t *testing.T, s testSigner, r *machine.Receipt) {
	t.Helper()
	r.Key = s.PublicKey()
	msg, err := machine.ReceiptCanonical(*r)
	require.NoError(t, err)
	sig, _ := s.Sign(msg)
	r.Sig = base64.RawURLEncoding.EncodeToString(sig)
}

// clone deep-copies an entry through JSON, as a reader of the bucket gets it.
func clone(t *testing.T, e *machine.Entry) *machine.Entry {
	t.Helper()
	data, err := json.Marshal(e)
	require.NoError(t, err)
	var c machine.Entry
	require.NoError(t, json.Unmarshal(data, &c))
	return &c
}

// TestReceipts_ChainOfALifecycle: every transition but a heartbeat
// appends a receipt signed in the same write, chained by hash, and the
// chain verifies; a Machine without a signer writes none.
func TestReceipts_ChainOfALifecycle(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	m := machine.New(env.Store, machine.WithSigner(s))

	e, err := m.Submit(ctx, call("receipts", "1"))
	require.NoError(t, err)
	require.Len(t, e.Receipts, 1)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Scope: machine.ScopeSession, Arguments: json.RawMessage(`{"query":"nats kv"}`)})
	require.NoError(t, err)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	_, err = m.Heartbeat(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	done, err := m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`{"hits":3}`), Cost: 0.5})
	require.NoError(t, err)
	stored, err := m.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, done, stored, "the receipts are in the entry written")

	rs := stored.Receipts
	var events []machine.Event
	for i, r := range rs {
		events = append(events, r.Event)
		assert.Equal(t, i+1, r.Seq)
		assert.Equal(t, e.PendingID, r.PendingID)
		assert.Equal(t, s.PublicKey(), r.Key)
		if i == 0 {
			assert.Empty(t, r.Prev)
		} else {
			h, err := machine.ReceiptHash(rs[i-1])
			require.NoError(t, err)
			assert.Equal(t, h, r.Prev)
		}
	}
	assert.Equal(t, []machine.Event{machine.EventAsk, machine.EventApprove, machine.EventStart, machine.EventSucceed}, events, "no receipt for the heartbeat")
	assert.Equal(t, "alice", rs[1].Actor)
	assert.Equal(t, machine.ScopeSession, rs[1].Scope)
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{"query":"nats"}`)), rs[0].ArgumentsDigest)
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{"query":"nats kv"}`)), rs[1].ArgumentsDigest, "the edited arguments")
	assert.Equal(t, machine.OutcomeDigest(json.RawMessage(`{"hits":3}`), "", 0.5), rs[3].ResultDigest)
	assert.Equal(t, "exec-1", rs[3].Actor)

	signers, err := machine.VerifyReceipts(stored, machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
	require.NoError(t, err)
	assert.Equal(t, []string{s.PublicKey()}, signers)

	plain, err := machine.New(env.Store).Submit(ctx, call("receipts", "2"))
	require.NoError(t, err)
	assert.Empty(t, plain.Receipts, "no signer, no receipts")
	_, err = machine.VerifyReceipts(plain, machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
	assert.ErrorContains(t, err, "entry: no receipts")
}

// TestReceipts_CanonicalForm: the signed bytes are the receipt without
// its signature, members sorted, no spaces, strings escaped as RFC 8785
// has them (no HTML escaping, control characters only).
func TestReceipts_CanonicalForm(t *testing.T) {
	t.Parallel()
	r := machine.Receipt{Seq: 2, PendingID: "c.1", ToolName: "Bash", Caller: "bot", Event: machine.EventReject, From: machine.StatePendingApproval,
		To: machine.StateRejectedByUser, Actor: "alice", At: 1700000000123, Reason: "no <rm> & \"quotes\"\n\u2028é\x01",
		ArgumentsDigest: "sha256:ab", Prev: "sha256:cd", Key: "K", Sig: "S"}
	got, err := machine.ReceiptCanonical(r)
	require.NoError(t, err)
	assert.Equal(t, `{"actor":"alice","argumentsDigest":"sha256:ab","at":1700000000123,"caller":"bot","event":"reject",`+
		`"from":"PENDING_APPROVAL","key":"K","pendingId":"c.1","prev":"sha256:cd","reason":"no <rm> & \"quotes\"\n`+"\u2028é"+`\u0001",`+
		`"seq":2,"to":"REJECTED_BY_USER","toolName":"Bash"}`, string(got))
}

// TestReceipts_VerifyNamesWhereAChainFails: each way an entry or its
// receipts can be changed after the fact fails verification, naming the
// receipt (or the entry's field) at fault.
func TestReceipts_VerifyNamesWhereAChainFails(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s, other := newTestSigner(t), newTestSigner(t)
	m := machine.New(env.Store, machine.WithSigner(s))
	e, err := m.Submit(ctx, call("verify", "1"))
	require.NoError(t, err)
	rejected, err := m.Decide(ctx, e.PendingID, machine.Decision{By: "alice", Reason: "too broad"})
	require.NoError(t, err)
	run, err := m.Submit(ctx, call("verify", "2"))
	require.NoError(t, err)
	alice := &machine.Identity{Issuer: "https://id.example.com", Subject: "0f9e", Name: "Alice Liddell", Email: "alice@example.com"}
	approved, err := m.Decide(ctx, run.PendingID, machine.Decision{Approve: true, By: "alice", Identity: alice})
	require.NoError(t, err)
	// Who decided, as the provider that signed her in knows her: on the
	// transition (which the event carries), the entry and the receipt.
	assert.Equal(t, alice, approved.LastTransition.Identity)
	assert.Equal(t, alice, approved.DeciderIdentity)
	assert.Equal(t, alice, approved.Receipts[1].Identity)
	assert.Nil(t, rejected.DeciderIdentity, "a decision made without a sign-in records none")
	_, err = m.Claim(ctx, run.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	ran, err := m.Complete(ctx, run.PendingID, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`{"ok":true}`)})
	require.NoError(t, err)

	check := machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}}
	for _, tc := range []struct {
		name    string
		entry   *machine.Entry
		change  func(e *machine.Entry)
		check   func(c *machine.ReceiptCheck)
		seq     int // 0: the entry
		problem string
	}{
		{name: "status rewritten", entry: rejected, change: func(e *machine.Entry) { e.Status = machine.StateApproved },
			problem: "status is APPROVED_READY_FOR_EXECUTION, but the last receipt, receipt 2 (reject by alice at "},
		{name: "the decision's receipt rewritten too", entry: rejected, change: func(e *machine.Entry) {
			e.Status = machine.StateApproved
			e.Receipts[1].Event, e.Receipts[1].To = machine.EventApprove, machine.StateApproved
		}, seq: 2, problem: "signature does not verify"},
		{name: "decider rewritten", entry: rejected, change: func(e *machine.Entry) { e.ApprovedOrRejectedByUserID = "bob" },
			problem: `says "bob" decided the call, but receipt 2 (reject by alice at`},
		{name: "decision time rewritten", entry: rejected, change: func(e *machine.Entry) { e.DecisionTime++ },
			problem: "decisionTime is"},
		{name: "first receipt's reason rewritten", entry: rejected, change: func(e *machine.Entry) { e.Receipts[0].Reason = "policy allows it" },
			seq: 1, problem: "signature does not verify"},
		{name: "a receipt dropped", entry: rejected, change: func(e *machine.Entry) { e.Receipts = e.Receipts[1:] },
			seq: 1, problem: "seq says 2"},
		{name: "a receipt replaced by one the key signed", entry: rejected, change: func(e *machine.Entry) {
			e.Receipts[0].Reason = "replaced"
			resign(t, s, &e.Receipts[0])
		}, seq: 2, problem: "prev does not match the hash of receipt 1"},
		{name: "signed by another key", entry: rejected, change: func(e *machine.Entry) { resign(t, other, &e.Receipts[1]) },
			seq: 2, problem: "signed by " + other.PublicKey() + ", not a trusted key"},
		{name: "a forged trust", entry: rejected, check: func(c *machine.ReceiptCheck) { c.Trusted = []string{other.PublicKey()} },
			seq: 1, problem: "not a trusted key"},
		{name: "a move the table has not", entry: rejected, change: func(e *machine.Entry) {
			e.Receipts[1].From = machine.StateExecuting
			resign(t, s, &e.Receipts[1])
		}, seq: 2, problem: "moves from EXECUTING, but receipt 1 left the call in PENDING_APPROVAL"},
		{name: "another call's receipts", entry: rejected, change: func(e *machine.Entry) { e.PendingID = run.PendingID },
			seq: 1, problem: "is about call " + e.PendingID},
		{name: "arguments rewritten", entry: ran, change: func(e *machine.Entry) { e.ToolArguments = json.RawMessage(`{"query":"rm -rf /"}`) },
			problem: "toolArguments do not match the argumentsDigest"},
		{name: "arguments and their digest rewritten", entry: ran, change: func(e *machine.Entry) {
			e.ToolArguments = json.RawMessage(`{"query":"rm -rf /"}`)
			e.ArgumentsDigest = machine.ArgumentsDigest(e.ToolArguments)
		}, problem: "argumentsDigest is " + machine.ArgumentsDigest(json.RawMessage(`{"query":"rm -rf /"}`)) + ", but the last receipt, receipt 4 (succeed by exec-1"},
		{name: "result rewritten", entry: ran, change: func(e *machine.Entry) { e.Result = json.RawMessage(`{"ok":false}`) },
			problem: "result, error or cost do not match the outcome receipt 4 (succeed by exec-1"},
		{name: "the decider's subject rewritten", entry: ran, change: func(e *machine.Entry) { e.DeciderIdentity.Subject = "mallory" },
			problem: "deciderIdentity is Alice Liddell <alice@example.com>, subject mallory at https://id.example.com, but receipt 2 (approve by alice at"},
		{name: "an identity given to a decision made without", entry: rejected, change: func(e *machine.Entry) { e.DeciderIdentity = alice },
			problem: "deciderIdentity is Alice Liddell <alice@example.com>, subject 0f9e at https://id.example.com, but receipt 2 (reject by alice at"},
		{name: "the receipt's identity rewritten", entry: ran, change: func(e *machine.Entry) {
			e.Receipts[1].Identity.Subject = "mallory"
			e.DeciderIdentity.Subject = "mallory"
		}, seq: 2, problem: "signature does not verify"},
		{name: "tool rewritten", entry: ran, change: func(e *machine.Entry) { e.ToolName = "Bash" },
			seq: 1, problem: "records tool web_search, but the entry says Bash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := clone(t, tc.entry)
			_, err := machine.VerifyReceipts(e, check)
			require.NoError(t, err, "as written, it verifies")
			if tc.change != nil {
				tc.change(e)
			}
			c := check
			c.Trusted = slices.Clone(check.Trusted)
			if tc.check != nil {
				tc.check(&c)
			}
			_, err = machine.VerifyReceipts(e, c)
			var re *machine.ReceiptError
			require.True(t, errors.As(err, &re), "want a ReceiptError, got %v", err)
			assert.Equal(t, tc.seq, re.Seq, "%v", err)
			assert.Contains(t, err.Error(), tc.problem)
		})
	}

	// Masked arguments are checked by their digest only.
	masked := clone(t, ran)
	masked.ToolArguments = json.RawMessage(`{"query":"[redacted]"}`)
	_, err = machine.VerifyReceipts(masked, machine.ReceiptCheck{Verify: verifyTest, Trusted: check.Trusted, ArgumentsMasked: true})
	assert.NoError(t, err)
}

// Under a quorum, each vote is a receipt of its own, and a vote written
// into the entry that no receipt records fails verification.
func TestReceipts_QuorumVotes(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := newTestSigner(t)
	m := machine.New(env.Store, machine.WithSigner(s), verdict(machine.Verdict{Action: machine.ActionAsk, Quorum: &machine.Quorum{Required: 2}}))
	ctx := t.Context()
	e, err := m.Submit(ctx, call("receipts-quorum", "c1"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob"})
	require.NoError(t, err)
	require.Len(t, got.Receipts, 3)
	assert.Equal(t, machine.EventVote, got.Receipts[1].Event)
	assert.Equal(t, "alice", got.Receipts[1].Actor)
	check := machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}}
	_, err = machine.VerifyReceipts(got, check)
	require.NoError(t, err)

	assert.Equal(t, "approve", got.Receipts[1].Vote)
	forged := clone(t, got)
	forged.Votes = append(forged.Votes, machine.Vote{By: "mallory", Approve: true, At: got.DecisionTime})
	_, err = machine.VerifyReceipts(forged, check)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mallory approved at")
	flipped := clone(t, got)
	flipped.Votes[0].Approve = false
	_, err = machine.VerifyReceipts(flipped, check)
	require.Error(t, err, "a vote turned around")
	assert.Contains(t, err.Error(), "alice rejected at")
}

// TestDecide_AnApprovalClaimsInTheSameWrite: a decision asked to claim
// the call it approves writes the approval and the claim as one
// revision, each with its receipt, and the chain verifies; a rejection
// claims nothing, and a claimant without a holder leaves the call
// approved.
func TestDecide_AnApprovalClaimsInTheSameWrite(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	m := machine.New(env.Store, machine.WithSigner(s), verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	exec1 := &machine.Claimant{Holder: "exec-1", Lease: time.Minute}

	e, err := m.Submit(ctx, call("claim-in-decision", "1"))
	require.NoError(t, err)
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Claim: exec1})
	require.NoError(t, err)
	assert.Equal(t, machine.StateExecuting, got.Status)
	assert.Equal(t, "alice", got.ApprovedOrRejectedByUserID)
	assert.Equal(t, 1, got.ExecutionAttempts)
	require.NotNil(t, got.Lease)
	assert.Equal(t, "exec-1", got.Lease.Holder)
	require.NotNil(t, got.PriorTransition)
	assert.Equal(t, machine.Transition{Event: machine.EventApprove, From: machine.StatePendingApproval, To: machine.StateApproved, Actor: "alice", DecidedBy: machine.DecidedByHuman, At: got.PriorTransition.At, Write: got.PriorTransition.Write}, *got.PriorTransition)
	assert.Equal(t, machine.EventStart, got.LastTransition.Event)
	assert.Equal(t, machine.StateApproved, got.LastTransition.From)
	assert.Equal(t, "exec-1", got.LastTransition.Actor)
	var events []machine.Event
	for _, r := range got.Receipts {
		events = append(events, r.Event)
	}
	assert.Equal(t, []machine.Event{machine.EventAsk, machine.EventApprove, machine.EventStart}, events)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob"})
	var te *machine.TransitionError
	require.ErrorAs(t, err, &te)
	assert.Contains(t, err.Error(), "EXECUTING by exec-1")
	assert.Contains(t, err.Error(), "decided by alice", "a second approver learns who decided first")
	done, err := m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`{"ok":true}`)})
	require.NoError(t, err)
	assert.Nil(t, done.PriorTransition, "the next write made one transition")
	_, err = machine.VerifyReceipts(clone(t, done), machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
	require.NoError(t, err)

	history, err := env.Store.History(ctx, e.PendingID)
	require.NoError(t, err)
	require.Len(t, history, 4)
	assert.Equal(t, []machine.Event{machine.EventAsk, machine.EventApprove, machine.EventStart, machine.EventSucceed},
		[]machine.Event{history[0].Event, history[1].Event, history[2].Event, history[3].Event})
	assert.Equal(t, history[1].Revision, history[2].Revision, "one write")

	rejected, err := m.Submit(ctx, call("claim-in-decision", "2"))
	require.NoError(t, err)
	got, err = m.Decide(ctx, rejected.PendingID, machine.Decision{By: "alice", Claim: exec1})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, got.Status)
	assert.Nil(t, got.Lease, "a rejection claims nothing")

	declined, err := m.Submit(ctx, call("claim-in-decision", "3"))
	require.NoError(t, err)
	got, err = m.Decide(ctx, declined.PendingID, machine.Decision{Approve: true, By: "alice", Claim: &machine.Claimant{Lease: time.Minute}})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Nil(t, got.PriorTransition)
	assert.Nil(t, got.Lease)
}

// TestSubmitAndClaim_ACallLetRunIsCreatedClaimed: a call the policy lets
// run at once is created claimed for the executor named (scheduled and
// started, one write, both receipts); one it delays, or asks about, is
// not.
func TestSubmitAndClaim_ACallLetRunIsCreatedClaimed(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := newTestSigner(t)
	claimFor := &machine.Claimant{Holder: "exec-1", Lease: time.Minute}

	now := machine.New(env.Store, machine.WithSigner(s), verdict(machine.Verdict{Action: machine.ActionRun}))
	e, created, err := now.SubmitAndClaim(ctx, call("created-claimed", "1"), claimFor)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, machine.StateExecuting, e.Status)
	require.NotNil(t, e.PriorTransition)
	assert.Equal(t, machine.EventSchedule, e.PriorTransition.Event)
	assert.Equal(t, machine.EventStart, e.LastTransition.Event)
	assert.Equal(t, 1, e.ExecutionAttempts)
	var events []machine.Event
	for _, r := range e.Receipts {
		events = append(events, r.Event)
	}
	assert.Equal(t, []machine.Event{machine.EventSchedule, machine.EventStart}, events)
	_, err = machine.VerifyReceipts(clone(t, e), machine.ReceiptCheck{Verify: verifyTest, Trusted: []string{s.PublicKey()}})
	require.NoError(t, err)
	again, created, err := now.SubmitAndClaim(ctx, call("created-claimed", "1"), claimFor)
	require.NoError(t, err)
	assert.False(t, created, "a retry creates nothing")
	assert.Equal(t, e.Lease, again.Lease, "a retry claims nothing")
	assert.Equal(t, e.Receipts, again.Receipts)

	later := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun, Delay: time.Hour}))
	e, _, err = later.SubmitAndClaim(ctx, call("created-claimed", "2"), claimFor)
	require.NoError(t, err)
	assert.Equal(t, machine.StateScheduled, e.Status, "not runnable yet")
	ask := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk}))
	e, _, err = ask.SubmitAndClaim(ctx, call("created-claimed", "3"), claimFor)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status)
	assert.Nil(t, e.Lease, "a call asked about is not claimed")
}

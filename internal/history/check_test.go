package history_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/history"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// t0 is the synthetic histories' start; at(n) is n milliseconds later.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const call = "conv.c1"

// op is an answered operation on call.
func op(client string, kind history.Kind, from, to int, status machine.State) *history.Op {
	return &history.Op{Call: call, Client: client, Kind: kind, Invoke: at(from), Return: at(to), Status: status}
}

func approve(o *history.Op) *history.Op { o.Approve = true; return o }

// store builds a call's stored revisions from its transitions, one write
// each, sequence numbers from 1, and the events the relay published for
// them.
type store struct {
	revs       []history.Revision
	events     map[string]int
	idempotent bool // the call's tool is declared idempotent
}

func newStore() *store { return &store{events: map[string]int{}} }

func (s *store) write(from machine.State, ev machine.Event, actor, reason string) *store {
	to, ok := ev.Target()
	if !ok {
		panic(ev)
	}
	seq := uint64(len(s.revs) + 1)
	e := &machine.Entry{PendingID: call, Status: to, Idempotent: s.idempotent, LastTransition: &machine.Transition{Event: ev, From: from, To: to, Actor: actor, Reason: reason, At: at(int(seq) * 100).UnixMilli()}}
	if ev == machine.EventStart || ev == machine.EventReclaim {
		e.ExecutionAttempts = 1
	}
	s.revs = append(s.revs, history.Revision{Seq: seq, Entry: e})
	for _, pub := range wire.EventsOf(e, seq) {
		s.events[pub.ID]++
	}
	return s
}

func (s *store) facts() history.Facts {
	return history.Facts{Revisions: map[string][]history.Revision{call: s.revs}, Events: s.events, ReadAt: at(10_000), AnswerWithin: 5 * time.Second}
}

// approvedAndRun is a call asked about, approved, claimed and run,
// succeeding: the store and the history of a run where all went well.
func approvedAndRun() (*store, []*history.Op) {
	s := newStore().
		write("", machine.EventAsk, "policy", "").
		write(machine.StatePendingApproval, machine.EventApprove, "approver", "").
		write(machine.StateApproved, machine.EventStart, "executor-1", "").
		write(machine.StateExecuting, machine.EventSucceed, "executor-1", "")
	ops := []*history.Op{
		op("agent-1", history.Submit, 0, 50, machine.StatePendingApproval),
		approve(op("approver", history.Decide, 60, 150, machine.StateApproved)),
		op("executor-1", history.Run, 320, 380, ""),
		op("agent-1", history.Read, 51, 450, machine.StateCompletedSuccess),
	}
	return s, ops
}

func rules(r *history.Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Rule)
	}
	return out
}

func TestCheck_AHistoryThatKeepsEveryPromisePasses(t *testing.T) {
	t.Parallel()
	s, ops := approvedAndRun()
	// The approver's answer was lost: it asked again and was refused,
	// told the call is approved already.
	retry := approve(op("approver", history.Decide, 200, 210, machine.StateApproved))
	retry.Refused = true
	lost := approve(&history.Op{Call: call, Client: "approver", Kind: history.Decide, Invoke: at(55)})
	r := history.Check(append(ops, retry, lost), s.facts())
	assert.False(t, r.Failed(), r.String())
	assert.Equal(t, 1, r.Calls)
	assert.Equal(t, 1, r.Runs)
}

// A decision applied twice: two approvers are each told they approved
// the call, and the store holds two approvals.
func TestCheck_CatchesADoubleApply(t *testing.T) {
	t.Parallel()
	s := newStore().
		write("", machine.EventAsk, "policy", "").
		write(machine.StatePendingApproval, machine.EventApprove, "alice", "").
		write(machine.StatePendingApproval, machine.EventApprove, "bob", "")
	ops := []*history.Op{
		op("agent-1", history.Submit, 0, 50, machine.StatePendingApproval),
		approve(op("alice", history.Decide, 60, 150, machine.StateApproved)),
		approve(op("bob", history.Decide, 160, 250, machine.StateApproved)),
	}
	r := history.Check(ops, s.facts())
	require.True(t, r.Failed())
	assert.Contains(t, rules(r), history.RuleLinearizable, r.String())
	assert.Contains(t, rules(r), history.RuleTable, r.String())
	assert.Contains(t, r.String(), "approve from PENDING_APPROVAL, but the entry was APPROVED_READY_FOR_EXECUTION")
	// The failure shows the history that broke.
	assert.Contains(t, r.String(), "bob decide approve → APPROVED_READY_FOR_EXECUTION")
}

// A lost update: the approver is told it approved, and a timeout
// written without seeing the approval overwrites it.
func TestCheck_CatchesALostUpdate(t *testing.T) {
	t.Parallel()
	s := newStore().
		write("", machine.EventAsk, "policy", "").
		write(machine.StatePendingApproval, machine.EventApprove, "approver", "").
		write(machine.StatePendingApproval, machine.EventTimeout, "timer", "")
	ops := []*history.Op{
		op("agent-1", history.Submit, 0, 50, machine.StatePendingApproval),
		approve(op("approver", history.Decide, 60, 150, machine.StateApproved)),
		op("agent-1", history.Read, 51, 400, machine.StateRejectedByTimeout),
	}
	r := history.Check(ops, s.facts())
	require.True(t, r.Failed())
	assert.Contains(t, rules(r), history.RuleLinearizable, r.String())
	assert.Contains(t, r.String(), "timeout from PENDING_APPROVAL, but the entry was APPROVED_READY_FOR_EXECUTION: a write that did not see the one before (a lost update)")
}

// The operations alone catch a lost update the store does not show: a
// read after the approval was answered sees the call pending again.
func TestCheck_CatchesAStaleReadAfterAWrite(t *testing.T) {
	t.Parallel()
	s, ops := approvedAndRun()
	ops = append(ops, op("agent-2", history.Read, 160, 170, machine.StatePendingApproval))
	r := history.Check(ops, s.facts())
	assert.Equal(t, []string{history.RuleLinearizable}, rules(r), r.String())
}

func TestCheck_CatchesARunOfARejectedCall(t *testing.T) {
	t.Parallel()
	s := newStore().
		write("", machine.EventAsk, "policy", "").
		write(machine.StatePendingApproval, machine.EventReject, "approver", "")
	ops := []*history.Op{
		op("agent-1", history.Submit, 0, 50, machine.StatePendingApproval),
		op("approver", history.Decide, 60, 150, machine.StateRejectedByUser),
		op("executor-1", history.Run, 300, 320, ""),
		op("agent-1", history.Read, 51, 400, machine.StateRejectedByUser),
	}
	r := history.Check(ops, s.facts())
	assert.Contains(t, rules(r), history.RuleNoRun, r.String())
	assert.Contains(t, rules(r), history.RuleLinearizable, r.String())
}

func TestCheck_ASecondRunNeedsALostLease(t *testing.T) {
	t.Parallel()
	s, ops := approvedAndRun()
	twice := append(ops, op("executor-2", history.Run, 385, 420, ""))
	r := history.Check(twice, s.facts())
	assert.Equal(t, []string{history.RuleRunPerLease}, rules(r), r.String())

	// With the first executor's lease lost and the call of an idempotent
	// tool reclaimed, a second run started after the first one stopped
	// is allowed, and counted.
	reclaimed := func(idempotent bool) *store {
		s := newStore()
		s.idempotent = idempotent
		return s.write("", machine.EventAsk, "policy", "").
			write(machine.StatePendingApproval, machine.EventApprove, "approver", "").
			write(machine.StateApproved, machine.EventStart, "executor-1", "").
			write(machine.StateExecuting, machine.EventReclaim, "executor-2", "").
			write(machine.StateExecuting, machine.EventSucceed, "executor-2", "")
	}
	twice[2].Token, twice[4].Token = call+"/1", call+"/2"
	r = history.Check(twice, reclaimed(false).facts())
	assert.Equal(t, []string{history.RuleAtMostOnce}, rules(r), "a tool not declared idempotent is never taken over: %s", r)
	s = reclaimed(true)
	r = history.Check(twice, s.facts())
	assert.False(t, r.Failed(), r.String())
	assert.Equal(t, 1, r.Reruns)
	assert.Zero(t, r.Overlapping)

	// One started while the first went on (the first executor's handler
	// not stopped before its lease ran out) is not.
	twice[4].Invoke = at(330)
	r = history.Check(twice, s.facts())
	assert.Equal(t, []string{history.RuleRunPerLease}, rules(r), r.String())
	assert.Equal(t, 1, r.Overlapping)
	assert.Contains(t, r.String(), "while executor-1's run")

	// Two runs under one fencing token are one lease run twice.
	twice[4].Invoke, twice[4].Token = at(385), call+"/1"
	r = history.Check(twice, s.facts())
	assert.Equal(t, []string{history.RuleRunPerLease}, rules(r), r.String())
}

func TestCheck_CatchesAMissingOrDoubledEvent(t *testing.T) {
	t.Parallel()
	s, ops := approvedAndRun()
	f := s.facts()
	id := wire.MsgID(call, 2)
	f.Events[id] = 0
	r := history.Check(ops, f)
	assert.Equal(t, []string{history.RuleOneEvent}, rules(r), r.String())
	f.Events[id] = 2
	r = history.Check(ops, f)
	assert.Equal(t, []string{history.RuleOneEvent}, rules(r), r.String())
	f.Events[id] = 1
	f.Events["other.9"] = 1
	r = history.Check(ops, f)
	assert.Equal(t, []string{history.RuleOneEvent}, rules(r), r.String())
}

func TestCheck_CatchesACallNotFinishedOrAnAgentNotAnswered(t *testing.T) {
	t.Parallel()
	s := newStore().
		write("", machine.EventAsk, "policy", "").
		write(machine.StatePendingApproval, machine.EventApprove, "approver", "")
	ops := []*history.Op{
		op("agent-1", history.Submit, 0, 50, machine.StatePendingApproval),
		approve(op("approver", history.Decide, 60, 150, machine.StateApproved)),
	}
	r := history.Check(ops, s.facts())
	assert.ElementsMatch(t, []string{history.RuleOneTerminal, history.RuleAnswered}, rules(r), r.String())

	// An answer later than the deadline is no answer.
	s, ops = approvedAndRun()
	ops[3].Return = at(6000)
	r = history.Check(ops, s.facts())
	assert.Equal(t, []string{history.RuleAnswered}, rules(r), r.String())
	assert.True(t, strings.Contains(r.String(), "agent-1 submitted at 03:04:05.000 had no final answer within 5s"), r.String())
}

// A submit whose answer was lost is asked again, and answered with the
// entry as it is by then: run and finished by toolgate, not decided by
// anyone, since nobody did.
func TestCheck_ASubmitAskedAgainIsAnsweredWithTheEntryAsItIs(t *testing.T) {
	t.Parallel()
	s := newStore().
		write("", machine.EventSchedule, "policy", "").
		write(machine.StateScheduled, machine.EventStart, "executor-1", "").
		write(machine.StateExecuting, machine.EventSucceed, "executor-1", "")
	ops := []*history.Op{
		op("agent-1", history.Submit, 0, 5000, machine.StateCompletedSuccess),
		op("executor-1", history.Run, 220, 280, ""),
		op("agent-1", history.Read, 5001, 5002, machine.StateCompletedSuccess),
	}
	r := history.Check(ops, s.facts())
	assert.False(t, r.Failed(), r.String())

	ops[0].Status = machine.StateRejectedByUser
	r = history.Check(ops, s.facts())
	assert.Contains(t, rules(r), history.RuleLinearizable, r.String())
}

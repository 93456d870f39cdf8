package machine_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

var update = flag.Bool("update", false, "rewrite golden files (the state diagram in docs/architecture.md)")

// verdict returns an evaluator that always answers v.
func verdict(v machine.Verdict) machine.Option {
	return machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return v, nil
	}))
}

func call(conv, id string) machine.Call {
	return machine.Call{ToolCallID: id, ToolName: "web_search", Arguments: json.RawMessage(`{"query":"nats"}`), CallerBotID: "bot-1", ConversationID: conv}
}

// command runs one Machine command on an entry.
type command struct {
	name string
	run  func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error)
}

var commands = []command{
	// The seeded approval deadline passed an hour ago; a decision is on
	// time only before that.
	{"approve", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return earlier(m).Decide(ctx, id, machine.Decision{Approve: true, By: "alice"})
	}},
	{"reject", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return earlier(m).Decide(ctx, id, machine.Decision{Approve: false, By: "alice", Reason: "no"})
	}},
	{"expire", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return m.Expire(ctx, id)
	}},
	{"cancel", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return m.Cancel(ctx, id, "system", "swarm stopped")
	}},
	{"claim", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return m.Claim(ctx, id, "exec-2", time.Minute)
	}},
	{"complete", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return m.Complete(ctx, id, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`{"ok":true}`), Cost: 2})
	}},
	{"fail", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return m.Fail(ctx, id, machine.Outcome{Holder: "exec-1", Error: "boom"})
	}},
	{"respond", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		return earlier(m).Decide(ctx, id, machine.Decision{By: "alice", Result: json.RawMessage(`{"answer":42}`)})
	}},
	{"heartbeat", func(ctx context.Context, m *machine.Machine, id string) (*machine.Entry, error) {
		// The seeded lease ran out an hour ago; a heartbeat is on time
		// only before that.
		return earlier(m).Heartbeat(ctx, id, "exec-1", time.Minute)
	}},
}

// earlier is m two hours ago, before the seeded deadlines.
func earlier(m *machine.Machine) *machine.Machine {
	return machine.New(m.Store(), machine.WithClock(func() time.Time { return time.Now().Add(-2 * time.Hour) }))
}

// legal is the specification the table must implement, written out by hand
// so that a wrong row in the table fails here: command → state → result.
var legal = map[string]map[machine.State]machine.State{
	"approve": {machine.StatePendingApproval: machine.StateApproved},
	"reject":  {machine.StatePendingApproval: machine.StateRejectedByUser},
	"expire":  {machine.StatePendingApproval: machine.StateRejectedByTimeout},
	"cancel": {
		machine.StatePendingApproval: machine.StateCancelled,
		machine.StateScheduled:       machine.StateCancelled,
		machine.StateApproved:        machine.StateCancelled,
	},
	"claim": {
		machine.StateScheduled: machine.StateExecuting,
		machine.StateApproved:  machine.StateExecuting,
		machine.StateExecuting: machine.StateExecuting, // lease ran out
	},
	"complete":  {machine.StateExecuting: machine.StateCompletedSuccess},
	"fail":      {machine.StateExecuting: machine.StateCompletedFailure},
	"heartbeat": {machine.StateExecuting: machine.StateExecuting},
	"respond":   {machine.StatePendingApproval: machine.StateCompletedSuccess},
}

// seed stores an entry directly in state s, with every deadline passed and
// an expired lease held by exec-1 (of an idempotent tool, which another
// executor may take over), so that only the state decides whether a
// command may run.
func seed(t *testing.T, ctx context.Context, store machine.Store, s machine.State, id string) uint64 {
	t.Helper()
	past := time.Now().Add(-time.Hour).UnixMilli()
	e := &machine.Entry{
		PendingID: machine.PendingID("table", id), ToolCallID: id, ToolName: "web_search",
		ToolArguments: json.RawMessage(`{}`), CallerBotID: "bot-1", ConversationID: "table",
		RequestedAt: past, Status: s, ApprovalTimeoutAt: past, ScheduledExecutionTime: past, AutoRejectOnTimeout: true, Respondable: true, Idempotent: true,
		LastTransition: &machine.Transition{Event: "seed", To: s, Actor: "test", At: past},
	}
	if s == machine.StateExecuting {
		e.Lease = &machine.Lease{Holder: "exec-1", ExpiresAt: past}
		e.ExecutionAttempts = 1
	}
	rev, err := store.Create(ctx, e)
	require.NoError(t, err)
	return rev
}

func TestTransitions_EveryStateTimesEveryCommand(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			env := bustest.Start(t, topo)
			m := machine.New(env.Store)
			ctx := t.Context()
			for _, s := range machine.States {
				for _, c := range commands {
					t.Run(fmt.Sprintf("%s/%s", s, c.name), func(t *testing.T) {
						id := fmt.Sprintf("%s-%s", s, c.name)
						rev := seed(t, ctx, env.Store, s, id)
						pid := machine.PendingID("table", id)
						got, err := c.run(ctx, m, pid)
						want, ok := legal[c.name][s]
						stored, storedRev, gerr := env.Store.Get(ctx, pid)
						require.NoError(t, gerr)
						if !ok {
							require.Error(t, err)
							assert.ErrorIs(t, err, machine.ErrInvalidTransition)
							assert.ErrorIs(t, err, machine.ErrConflict)
							var te *machine.TransitionError
							require.ErrorAs(t, err, &te)
							assert.Equal(t, s, te.Entry.Status, "the error names the state the entry is in")
							assert.Contains(t, err.Error(), string(s))
							assert.Equal(t, rev, storedRev, "a refused command writes nothing")
							return
						}
						require.NoError(t, err)
						assert.Equal(t, want, got.Status)
						assert.Equal(t, want, stored.Status)
						assert.Greater(t, storedRev, rev)
						require.NotNil(t, stored.LastTransition)
						assert.Equal(t, s, stored.LastTransition.From)
						assert.Equal(t, want, stored.LastTransition.To)
					})
				}
			}
		})
	}
}

func TestTable_EveryStateReachableAndTerminalStatesFinal(t *testing.T) {
	t.Parallel()
	reached := map[machine.State]bool{}
	frontier := []machine.State{""}
	for len(frontier) > 0 {
		from := frontier[0]
		frontier = frontier[1:]
		for _, ev := range machine.Events() {
			to, _ := ev.Target()
			if machine.CanFire(from, ev) && !reached[to] {
				reached[to] = true
				frontier = append(frontier, to)
			}
		}
	}
	for _, s := range machine.States {
		assert.True(t, reached[s], "%s is unreachable", s)
	}
	terminal := []machine.State{
		machine.StateRejectedByUser, machine.StateRejectedByTimeout, machine.StateRejectedByPolicy,
		machine.StateCompletedSuccess, machine.StateCompletedFailure, machine.StateCancelled,
	}
	for _, s := range machine.States {
		assert.Equal(t, slices.Contains(terminal, s), s.Terminal(), "%s terminal", s)
		if s.Terminal() {
			for _, ev := range machine.Events() {
				assert.False(t, machine.CanFire(s, ev), "terminal %s accepts %s", s, ev)
			}
		}
	}
	assert.False(t, machine.State("BOGUS").Terminal())
}

func TestTable_EveryEventIsPublishedOrMarkedSilent(t *testing.T) {
	t.Parallel()
	seen := map[machine.Event]bool{}
	for _, ev := range machine.Events() {
		assert.False(t, seen[ev], "%s has two rows", ev)
		seen[ev] = true
		name, named := ev.PublicName()
		if ev.Silent() {
			assert.False(t, named, "silent %s has a public name %q", ev, name)
			assert.False(t, ev.Notifies(), "silent %s notifies humans, who would never hear of it", ev)
			continue
		}
		if assert.True(t, named, "%s has no public name and is not marked silent", ev) {
			assert.True(t, natsToken(name), "%s's public name %q is not one NATS subject token", ev, name)
		}
	}
	assert.True(t, machine.EventHeartbeat.Silent())
	for _, bogus := range []machine.Event{"", "BOGUS"} {
		_, named := bogus.PublicName()
		assert.False(t, named || bogus.Silent() || bogus.Notifies(), "%q is no event", bogus)
	}
}

// natsToken reports whether s can be one token of a NATS subject that a
// consumer may filter on literally: not empty, no separator, no wildcard,
// nothing a client would split or reject.
func natsToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f || r > 0x7e
	})
}

func TestSubmit_VerdictChoosesFirstState(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	for _, tc := range []struct {
		v    machine.Verdict
		want machine.State
	}{
		{machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute, Approver: "alice", Reason: "requiresApprovalTools", Risk: machine.RiskHigh}, machine.StatePendingApproval},
		{machine.Verdict{Action: machine.ActionRun, Delay: 2 * time.Second, Reason: "toolSpecificDelays"}, machine.StateScheduled},
		{machine.Verdict{Action: machine.ActionDeny, Reason: `rules.deny "Bash(rm -rf *)"`}, machine.StateRejectedByPolicy},
	} {
		t.Run(string(tc.v.Action), func(t *testing.T) {
			before := time.Now().UnixMilli()
			m := machine.New(env.Store, verdict(tc.v))
			e, err := m.Submit(ctx, call("submit", string(tc.v.Action)))
			require.NoError(t, err)
			assert.Equal(t, tc.want, e.Status)
			assert.Equal(t, tc.v.Reason, e.StatusReason)
			assert.Equal(t, tc.v.Reason, e.LastTransition.Reason)
			assert.Equal(t, tc.v.Risk, e.Risk, "the entry records the risk the policy attached")
			if data, _ := json.Marshal(e); tc.v.Risk == "" {
				assert.NotContains(t, string(data), `"risk"`, "no risk: no field")
			}
			switch tc.v.Action {
			case machine.ActionAsk:
				assert.InDelta(t, before+time.Minute.Milliseconds(), e.ApprovalTimeoutAt, 1000)
				assert.Equal(t, "alice", e.UserIDToApprove)
			case machine.ActionRun:
				assert.InDelta(t, before+2000, e.ScheduledExecutionTime, 1000)
				assert.False(t, e.Runnable(time.Now()))
				assert.True(t, e.Runnable(time.Now().Add(3*time.Second)))
			}
			stored, err := m.Get(ctx, e.PendingID)
			require.NoError(t, err)
			assert.Equal(t, e, stored)
		})
	}
}

func TestSubmit_SameToolCallReturnsExistingEntry(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store)
	first, err := m.Submit(ctx, call("retry", "call_1"))
	require.NoError(t, err)
	_, err = m.Decide(ctx, first.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)

	again, err := m.Submit(ctx, call("retry", "call_1"))
	require.NoError(t, err)
	assert.Equal(t, first.PendingID, again.PendingID)
	assert.Equal(t, machine.StateApproved, again.Status, "the retry sees the decision, not a new entry")

	other, err := m.Submit(ctx, call("other-conversation", "call_1"))
	require.NoError(t, err)
	assert.NotEqual(t, first.PendingID, other.PendingID)
	assert.Equal(t, machine.StatePendingApproval, other.Status)

	// The same id for another call is refused, never answered with the
	// first call's entry (and its approval).
	for name, change := range map[string]func(*machine.Call){
		"caller":    func(c *machine.Call) { c.CallerBotID = "bot-2" },
		"tool":      func(c *machine.Call) { c.ToolName = "send_email" },
		"arguments": func(c *machine.Call) { c.Arguments = json.RawMessage(`{"query":"something else"}`) },
	} {
		c := call("retry", "call_1")
		change(&c)
		_, err := m.Submit(ctx, c)
		assert.ErrorIs(t, err, machine.ErrIdempotencyConflict, name)
		assert.ErrorIs(t, err, machine.ErrConflict, name)
	}
	// The same arguments spaced or ordered otherwise are the same call.
	c := call("retry", "call_1")
	var args map[string]any
	require.NoError(t, json.Unmarshal(c.Arguments, &args))
	c.Arguments, err = json.MarshalIndent(args, "", "  ")
	require.NoError(t, err)
	again, err = m.Submit(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, again.Status)
}

func TestSubmit_BadInputNamesTheField(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	m := machine.New(env.Store)
	for field, mutate := range map[string]func(*machine.Call){
		"toolName":       func(c *machine.Call) { c.ToolName = "web search" },
		"conversationId": func(c *machine.Call) { c.ConversationID = "" },
		"callerBotId":    func(c *machine.Call) { c.CallerBotID = "" },
		"toolArguments":  func(c *machine.Call) { c.Arguments = json.RawMessage(`[1,2]`) },
		"estimatedCost":  func(c *machine.Call) { c.EstimatedCost = -1 },
	} {
		c := call("bad", "call_"+field)
		mutate(&c)
		_, err := m.Submit(t.Context(), c)
		assert.ErrorIs(t, err, machine.ErrInvalid, field)
		assert.ErrorContains(t, err, field)
	}
	entries, err := m.ListConversation(t.Context(), "bad")
	require.NoError(t, err)
	assert.Empty(t, entries, "refused input stores nothing")
}

func TestPendingID_EncodesAnyConversation(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, conv := range []string{"conv_123", "a.b", "a b", "=YQ", "ünï", "a/b", "-"} {
		id := machine.PendingID(conv, "call.1")
		assert.True(t, machine.ValidPendingID(id), id)
		assert.Equal(t, 1, strings.Count(id, "."), id)
		assert.True(t, strings.HasPrefix(id, machine.ConversationKey(conv)+"."))
		if prev, dup := seen[id]; dup {
			t.Errorf("%q and %q share id %s", prev, conv, id)
		}
		seen[id] = conv
	}
	assert.Equal(t, "conv_123.call_1", machine.PendingID("conv_123", "call_1"))
	for _, bad := range []string{"", "nodot", "a.b.c", "=.x", "a .b", "a.*", "a.>"} {
		assert.False(t, machine.ValidPendingID(bad), bad)
	}
}

func TestDecide_OnlyAllowedApprovers(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, Approvers: []string{"alice", "bob"}}))
	e, err := m.Submit(ctx, call("approvers", "c1"))
	require.NoError(t, err)

	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "mallory"})
	assert.ErrorIs(t, err, machine.ErrForbidden)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bot-1"})
	assert.ErrorIs(t, err, machine.ErrForbidden, "the agent that asked may not approve")
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true})
	assert.ErrorIs(t, err, machine.ErrInvalid)

	got, err := m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob", Reason: "fine"})
	require.NoError(t, err)
	assert.Equal(t, "bob", got.ApprovedOrRejectedByUserID)
	assert.NotZero(t, got.DecisionTime)

	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: false, By: "alice"})
	require.ErrorIs(t, err, machine.ErrConflict)
	assert.ErrorContains(t, err, "APPROVED_READY_FOR_EXECUTION by bob", "the loser learns who decided first")
}

func TestExpire_NotBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true}))
	e, err := m.Submit(ctx, call("expire", "c1"))
	require.NoError(t, err)
	_, err = m.Expire(ctx, e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict)

	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
	got, err := later.Expire(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByTimeout, got.Status)
}

func TestClaim_LeaseAndHolder(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun, Idempotent: true}))
	e, err := m.Submit(ctx, call("claim", "c1"))
	require.NoError(t, err)

	got, err := m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 1, got.ExecutionAttempts)
	assert.Equal(t, "exec-1", got.Lease.Holder)

	_, err = m.Claim(ctx, e.PendingID, "exec-2", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "a live lease is not taken over")
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "not even by its holder: a duplicate work item starts no second run")
	_, err = m.Retry(ctx, e.PendingID, "exec-1", 2, time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "a retry of an attempt that is not the last one")
	_, err = m.Retry(ctx, e.PendingID, "exec-2", 1, time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "a retry by another executor")
	got, err = m.Retry(ctx, e.PendingID, "exec-1", 1, time.Minute)
	require.NoError(t, err, "its holder retries the attempt that failed")
	assert.Equal(t, 2, got.ExecutionAttempts)
	_, err = m.Retry(ctx, e.PendingID, "exec-1", 1, time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "the same failure is retried once")

	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(2 * time.Minute) }))
	got, err = later.Claim(ctx, e.PendingID, "exec-2", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 3, got.ExecutionAttempts)
	assert.Equal(t, machine.EventReclaim, got.LastTransition.Event)

	_, err = m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`1`)})
	assert.ErrorIs(t, err, machine.ErrConflict, "the executor that lost its lease may not record")
	got, err = m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-2", Result: json.RawMessage(`{"hits":3}`), Cost: 1.5})
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, got.Status)
	assert.JSONEq(t, `{"hits":3}`, string(got.Result))
	assert.Nil(t, got.Lease)

	sched := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun, Delay: time.Hour}))
	e, err = sched.Submit(ctx, call("claim", "c2"))
	require.NoError(t, err)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "a call scheduled for later is not claimed early")
}

func TestDiagram_MatchesGoldenAndReadme(t *testing.T) {
	t.Parallel()
	got := machine.Diagram()
	golden := "testdata/states.mmd"
	readme := "../docs/architecture.md"
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
		doc, err := os.ReadFile(readme)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(readme, []byte(replaceDiagram(t, string(doc), got)), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "run go test ./machine -update")
	doc, err := os.ReadFile(readme)
	require.NoError(t, err)
	assert.Contains(t, string(doc), "```mermaid\n"+got+"```", "docs/architecture.md's diagram is stale: run go test ./machine -update")
}

func replaceDiagram(t *testing.T, doc, diagram string) string {
	start := strings.Index(doc, "```mermaid\nstateDiagram-v2\n")
	require.GreaterOrEqual(t, start, 0, "docs/architecture.md has no state diagram block")
	end := strings.Index(doc[start+3:], "```")
	return doc[:start] + "```mermaid\n" + diagram + doc[start+3+end:]
}

func TestTransitionError_Message(t *testing.T) {
	t.Parallel()
	e := &machine.Entry{PendingID: "c.1", Status: machine.StateRejectedByTimeout,
		LastTransition: &machine.Transition{Actor: "timer", Reason: "approval timed out", At: 0}}
	err := fmt.Errorf("decide c.1: %w", &machine.TransitionError{Event: machine.EventApprove, Entry: e})
	assert.Equal(t, "decide c.1: approve not allowed: c.1 is REJECTED_BY_TIMEOUT by timer at 1970-01-01T00:00:00Z (approval timed out)", err.Error())
	assert.True(t, errors.Is(err, machine.ErrConflict))
}

func TestDecide_AfterTheDeadlineIsRefusedAsExpired(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true}))
	e, err := m.Submit(ctx, call("late", "c1"))
	require.NoError(t, err)
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
	_, err = later.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.ErrorIs(t, err, machine.ErrExpired)
	assert.ErrorIs(t, err, machine.ErrConflict, "an expired decision is a conflict, for callers that know no better")
	got, err := m.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "the machine refuses; expiring is a command of its own")
}

func TestExpire_WithoutAutoRejectFlagsOnceAndStaysPending(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Nanosecond, AutoRejectOnTimeout: false}))
	e, err := m.Submit(ctx, call("overdue", "c1"))
	require.NoError(t, err)
	got, err := m.Expire(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status)
	assert.Equal(t, machine.EventOverdue, got.LastTransition.Event)
	assert.True(t, got.Overdue)
	_, err = m.Expire(ctx, e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict, "flagged once")
	got, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err, "an overdue call can still be decided")
	assert.Equal(t, machine.StateApproved, got.Status)
}

func TestAbandonLease_FailsAnIdempotentCallOnlyWhenAttemptsAreSpent(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun, MaxExecutionAttempts: 2, Idempotent: true}))
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	e, err := m.Submit(ctx, call("abandon", "c1"))
	require.NoError(t, err)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)

	_, err = later.AbandonLease(ctx, e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict, "one attempt is left: the call is queued again, not failed")
	got, err := later.Claim(ctx, e.PendingID, "exec-2", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 2, got.ExecutionAttempts)
	assert.Equal(t, 0, got.AttemptsLeft())

	evenLater := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(3 * time.Hour) }))
	_, err = evenLater.Claim(ctx, e.PendingID, "exec-3", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "no attempts left to reclaim with")
	_, err = m.AbandonLease(ctx, e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict, "the lease has not run out yet")
	got, err = evenLater.AbandonLease(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.Contains(t, got.Error, "exec-2 lost its lease on attempt 2")
	assert.Contains(t, got.Error, "the last attempt allowed")
	assert.True(t, got.OutcomeUnknown)
}

// TestAbandonLease_ALostRunOfAToolNotIdempotentEndsUnknown: the tool
// may have run when its executor was lost, so no other executor takes
// the call over, whatever attempts are left; the timer ends it at once
// with its outcome unknown, saying why.
func TestAbandonLease_ALostRunOfAToolNotIdempotentEndsUnknown(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun, MaxExecutionAttempts: 3}))
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	e, err := m.Submit(ctx, call("unknown", "c1"))
	require.NoError(t, err)
	require.False(t, e.Idempotent)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)

	_, err = later.Claim(ctx, e.PendingID, "exec-2", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "a lost run of a tool not declared idempotent is not taken over")
	_, err = m.AbandonLease(ctx, e.PendingID)
	assert.ErrorIs(t, err, machine.ErrConflict, "the lease has not run out yet")
	got, err := later.AbandonLease(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedFailure, got.Status)
	assert.True(t, got.OutcomeUnknown)
	assert.Equal(t, 1, got.ExecutionAttempts)
	assert.Contains(t, got.Error, "result unknown: executor exec-1 lost its lease on attempt 1")
	assert.Contains(t, got.Error, "not declared idempotent")
	assert.Equal(t, "executor lost: result unknown", got.LastTransition.Reason)
}

func TestHeartbeat_RenewsOnlyTheHoldersLease(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun}))
	e, err := m.Submit(ctx, call("hb", "c1"))
	require.NoError(t, err)
	claimed, err := m.Claim(ctx, e.PendingID, "exec-1", time.Second)
	require.NoError(t, err)
	_, err = m.Heartbeat(ctx, e.PendingID, "exec-2", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict)
	got, err := m.Heartbeat(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, got.Lease.ExpiresAt, claimed.Lease.ExpiresAt+50_000)
	assert.Equal(t, 1, got.ExecutionAttempts, "a heartbeat is not an attempt")
}

func TestHeartbeat_NotOnALeaseThatRanOut(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun}))
	e, err := m.Submit(ctx, call("late-hb", "c1"))
	require.NoError(t, err)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	late := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(2 * time.Minute) }))
	_, err = late.Heartbeat(ctx, e.PendingID, "exec-1", time.Minute)
	assert.ErrorIs(t, err, machine.ErrConflict, "the timer may have queued it elsewhere: the holder must stop")
}

// TestRefusal_NamesTheEntryAsStored: a report refused because another
// executor holds the call names that executor, the holder as stored,
// not the refused one the attempted transition would have named.
func TestRefusal_NamesTheEntryAsStored(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionRun, MaxExecutionAttempts: 3, Idempotent: true}))
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	e, err := m.Submit(ctx, call("refusal-names", "c1"))
	require.NoError(t, err)
	_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	_, err = later.Claim(ctx, e.PendingID, "exec-2", time.Minute)
	require.NoError(t, err, "exec-1's lease ran out: exec-2 reclaims")

	for name, refused := range map[string]func() error{
		"complete": func() error { _, err := m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-1"}); return err },
		"fail": func() error {
			_, err := m.Fail(ctx, e.PendingID, machine.Outcome{Holder: "exec-1", Error: "x"})
			return err
		},
		"heartbeat": func() error { _, err := m.Heartbeat(ctx, e.PendingID, "exec-1", time.Minute); return err },
		"retry":     func() error { _, err := m.Retry(ctx, e.PendingID, "exec-1", 1, time.Minute); return err },
		"claim":     func() error { _, err := m.Claim(ctx, e.PendingID, "exec-3", time.Minute); return err },
	} {
		err := refused()
		var te *machine.TransitionError
		require.ErrorAs(t, err, &te, name)
		assert.Equal(t, "exec-2", te.Entry.Lease.Holder, name)
		assert.Equal(t, "exec-2", te.Entry.LastTransition.Actor, "%s: the refusal names the transition stored", name)
		assert.Contains(t, err.Error(), "by exec-2", name)
		assert.NotContains(t, err.Error(), "by exec-1", name)
	}
}

// lostAnswerStore is a Store whose next Update is written but answered
// with a conflict, as a write asked again after its first answer was
// lost finds the key moved on: by itself.
type lostAnswerStore struct {
	machine.Store
	lose bool
}

func (s *lostAnswerStore) Update(ctx context.Context, e *machine.Entry, revision uint64) (uint64, error) {
	rev, err := s.Store.Update(ctx, e, revision)
	if err == nil && s.lose {
		s.lose = false
		return 0, fmt.Errorf("%s at revision %d: %w", e.PendingID, revision, machine.ErrConflict)
	}
	return rev, err
}

// TestTransition_AWriteThatLandedDespiteAConflictIsItsOwn: a transition
// whose write landed though it was answered as a conflict reads the
// entry again, finds its own write there, and answers with it rather
// than refusing the command as one that came too late.
func TestTransition_AWriteThatLandedDespiteAConflictIsItsOwn(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	store := &lostAnswerStore{Store: env.Store}
	m := machine.New(store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour}))
	e, err := m.Submit(ctx, call("lost-answer", "c1"))
	require.NoError(t, err)
	store.lose = true
	got, err := m.Decide(ctx, e.PendingID, machine.Decision{By: "alice", Reason: "no"})
	require.NoError(t, err, "the rejection landed: it is the answer")
	assert.Equal(t, machine.StateRejectedByUser, got.Status)
	assert.Equal(t, "alice", got.LastTransition.Actor)
	assert.False(t, store.lose)
}

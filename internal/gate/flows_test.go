package gate_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

const flowsPolicy = `
default:
  requiresApprovalTools: none
  matchArgument: {mcp__mail__send_email: to}
  rules:
    allow: [mcp__mail]
  flows:
    - after: mcp__mail__read_inbox
      then: mcp__mail__send_email
      unless: ["mcp__mail__send_email(*@example.com)"]
      within: 1h
      reason: mail read from the inbox may leave the company
`

// testClock is a settable clock for the gates and engines of one test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Skip(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestFlows_TwoReplicasShareTheMarks: a read of the inbox completed in
// conversation A through one replica makes a send to an outside address
// in A, submitted through another replica, ask, naming both calls; in
// conversation B, to an inside address, after a failed read, or once
// the window has passed, the send runs. Explain and dry-run say the same;
// and so it goes with both replicas serving conversations at once.
func TestFlows_TwoReplicasShareTheMarks(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	clock := &testClock{now: time.Now().UTC().Truncate(time.Millisecond)}
	doc, err := policy.Parse([]byte(flowsPolicy))
	require.NoError(t, err)
	replica := func() *gate.Service {
		engine, err := policy.NewEngine(doc, nil, nil, policy.WithClock(clock.Now),
			policy.WithFlowMarks(stores.NewFlowMarks(env.JS, env.Buckets.Flows)))
		require.NoError(t, err)
		return gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine, Clock: clock.Now})
	}
	one, two := replica(), replica()
	_, err = one.SetPolicy(ctx, gate.System, wire.PolicyDocument{Document: flowsPolicy})
	require.NoError(t, err)
	bot, exec := actor("bot", wire.RoleAgent), actor("exec", wire.RoleExecutor)

	n := 0
	submit := func(g *gate.Service, conv, tool, args string) *machine.Entry {
		t.Helper()
		n++
		clock.Skip(time.Second) // each call a second after the last, so that a replay orders them
		e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: fmt.Sprint("t", n), ToolName: tool, ConversationID: conv, Arguments: []byte(args)})
		require.NoError(t, err)
		return e
	}
	run := func(g *gate.Service, e *machine.Entry, ok bool) {
		t.Helper()
		_, err := g.ClaimAt(ctx, exec, wire.ReportRequest{PendingID: e.PendingID, By: "w", LeaseMs: time.Minute.Milliseconds()})
		require.NoError(t, err)
		clock.Skip(time.Second)
		report := g.Complete
		if !ok {
			report = g.Fail
		}
		got, err := report(ctx, exec, wire.ReportRequest{PendingID: e.PendingID, By: "w", Error: map[bool]string{false: "inbox down"}[ok]})
		require.NoError(t, err)
		require.True(t, got.Status.Terminal(), "%s", got.Status)
	}
	outside, inside := `{"to":"eve@evil.test"}`, `{"to":"bob@example.com"}`
	asks := func(e *machine.Entry) bool { return e.Status == machine.StatePendingApproval }

	assert.False(t, asks(submit(two, "A", "mcp__mail__send_email", outside)), "nothing read yet")
	read := submit(one, "A", "mcp__mail__read_inbox", `{}`)
	require.False(t, asks(read))
	run(one, read, true)
	failed := submit(one, "C", "mcp__mail__read_inbox", `{}`)
	run(one, failed, false)

	held := submit(two, "A", "mcp__mail__send_email", outside)
	require.True(t, asks(held), "%s: %s", held.Status, held.LastTransition.Reason)
	assert.Equal(t, machine.DecidedByRule, held.DecidedBy)
	reason := held.LastTransition.Reason
	assert.Contains(t, reason, `flows[0] "mcp__mail__read_inbox" → "mcp__mail__send_email" (default): follows mcp__mail__read_inbox (`+read.PendingID+")")
	assert.Contains(t, reason, "mail read from the inbox may leave the company")
	assert.False(t, asks(submit(two, "B", "mcp__mail__send_email", outside)), "another conversation")
	assert.False(t, asks(submit(two, "A", "mcp__mail__send_email", inside)), "an inside address")
	assert.False(t, asks(submit(two, "C", "mcp__mail__send_email", outside)), "a read that failed marks nothing")

	// Explain, on either replica, names the flow and the read.
	x, err := one.PolicyExplain(ctx, actor("vera", wire.RoleViewer), wire.PolicyExplainRequest{
		ToolName: "mcp__mail__send_email", Arguments: []byte(outside), ConversationID: "A"})
	require.NoError(t, err)
	assert.Equal(t, wire.VerdictAsk, x.Verdict)
	require.Len(t, x.Flows, 1)
	assert.True(t, x.Flows[0].Decided)
	require.NotNil(t, x.Flows[0].After)
	assert.Equal(t, read.PendingID, x.Flows[0].After.PendingID)
	x, err = two.PolicyExplain(ctx, actor("vera", wire.RoleViewer), wire.PolicyExplainRequest{
		ToolName: "mcp__mail__send_email", Arguments: []byte(outside), ConversationID: "B"})
	require.NoError(t, err)
	assert.Equal(t, wire.VerdictAllow, x.Verdict)
	require.Len(t, x.Flows, 1)
	assert.Nil(t, x.Flows[0].After)
	assert.Contains(t, x.Flows[0].Why, "no call of \"mcp__mail__read_inbox\" completed in conversation B")

	// The window passes.
	clock.Skip(time.Hour + time.Second)
	assert.False(t, asks(submit(two, "A", "mcp__mail__send_email", outside)), "after within")

	// A dry run of the policy over the calls replays the read's
	// completion before the sends, as they happened: the held send is
	// asked about again, and every other send runs as it did.
	dry, err := one.PolicyDryRun(ctx, actor("vera", wire.RoleViewer), wire.PolicyDryRunRequest{Document: flowsPolicy,
		Since: clock.Now().Add(-2 * time.Hour).UnixMilli()})
	require.NoError(t, err)
	assert.Equal(t, 8, dry.Calls)
	assert.Zero(t, dry.Changed)
	assert.Equal(t, wire.DryRunRecorded{}, dry.Recorded, "the replay says of each call what the gate said")

	// Both replicas at once: in each of 8 conversations a read completes
	// on one replica while the others' sends go through the other.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			g, h := []*gate.Service{one, two}[i%2], []*gate.Service{two, one}[i%2]
			conv := fmt.Sprint("P", i)
			call := func(g *gate.Service, id, tool, conv, args string) *machine.Entry {
				e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: id, ToolName: tool, ConversationID: conv, Arguments: []byte(args)})
				if !assert.NoError(t, err) {
					return &machine.Entry{}
				}
				return e
			}
			read := call(g, "r", "mcp__mail__read_inbox", conv, `{}`)
			if _, err := g.ClaimAt(ctx, exec, wire.ReportRequest{PendingID: read.PendingID, By: conv, LeaseMs: 60_000}); !assert.NoError(t, err) {
				return
			}
			_, err := g.Complete(ctx, exec, wire.ReportRequest{PendingID: read.PendingID, By: conv})
			assert.NoError(t, err)
			sent := call(h, "s", "mcp__mail__send_email", conv, outside)
			if assert.True(t, asks(sent), "%s: %s", conv, sent.Status) {
				assert.Contains(t, sent.LastTransition.Reason, "("+read.PendingID+")")
			}
			assert.False(t, asks(call(h, "s", "mcp__mail__send_email", fmt.Sprint("Q", i), outside)), "Q%d", i)
		})
	}
	wg.Wait()
}

// TestFlows_AnAnsweredCallCompletesAsARunWould: an approver's answer to
// the read, in place of running it, gives the agent what was read: the
// send after it in the conversation asks, as after a run.
func TestFlows_AnAnsweredCallCompletesAsARunWould(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	const doc = `
default:
  matchArgument: {mcp__mail__send_email: to}
  rules:
    ask: [mcp__mail__read_inbox]
    allow: [mcp__mail__send_email]
  respondable: [mcp__mail__read_inbox]
  flows:
    - after: mcp__mail__read_inbox
      then: mcp__mail__send_email
      within: 1h
`
	d, err := policy.Parse([]byte(doc))
	require.NoError(t, err)
	engine, err := policy.NewEngine(d, nil, nil, policy.WithFlowMarks(stores.NewFlowMarks(env.JS, env.Buckets.Flows)))
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine})
	bot := actor("bot", wire.RoleAgent)
	submit := func(id, tool string) *machine.Entry {
		t.Helper()
		e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: id, ToolName: tool, ConversationID: "A", Arguments: []byte(`{"to":"eve@evil.test"}`)})
		require.NoError(t, err)
		return e
	}
	require.Equal(t, machine.StateScheduled, submit("t1", "mcp__mail__send_email").Status, "nothing read yet")
	read := submit("t2", "mcp__mail__read_inbox")
	require.Equal(t, machine.StatePendingApproval, read.Status)
	answered, err := g.Decide(ctx, actor("alice", wire.RoleApprover), wire.DecideRequest{PendingID: read.PendingID, Result: []byte(`{"messages":[]}`)})
	require.NoError(t, err)
	require.Equal(t, machine.StateCompletedSuccess, answered.Status)
	held := submit("t3", "mcp__mail__send_email")
	assert.Equal(t, machine.StatePendingApproval, held.Status, "%s", held.LastTransition.Reason)
	assert.Contains(t, held.LastTransition.Reason, read.PendingID)
}

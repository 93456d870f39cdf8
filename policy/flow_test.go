package policy

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/machine"
)

func TestParse_FlowErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"after missing", "default:\n  flows: [{then: mcp__mail__send_email, within: 1h}]",
			`policy: default.flows[0].after: required: a pattern in rule syntax`},
		{"bad then", "teams:\n  ops:\n    flows: [{after: Read, then: 'Bash(git push', within: 1h}]",
			`policy: teams.ops.flows[0].then: "Bash(git push": must end with ")"`},
		{"bad unless", "default:\n  flows: [{after: Read, then: Bash, unless: ['Bash('], within: 1h}]",
			`policy: default.flows[0].unless[0]: "Bash(": must end with ")"`},
		{"unless of another tool", "default:\n  flows: [{after: Read, then: Bash, unless: ['WebFetch(domain:x.com)'], within: 1h}]",
			`policy: default.flows[0].unless[0]: "WebFetch(domain:x.com)" names WebFetch, which then ("Bash") does not match: it would exempt nothing`},
		{"within missing", "default:\n  flows: [{after: Read, then: Bash}]",
			`policy: default.flows[0].within: required: a duration such as 30s, 10m or 1h`},
		{"within unparsable", "default:\n  flows: [{after: Read, then: Bash, within: an hour}]",
			`policy: default.flows[0].within: must be a duration such as 30s, 10m or 1h, got "an hour"`},
		{"within too long", "default:\n  flows: [{after: Read, then: Bash, within: 48h}]",
			`policy: default.flows[0].within: must be 1s to 24h, got "48h"`},
		{"scope", "conversations:\n  c1:\n    flows: [{after: Read, then: Bash, within: 1h, scope: team}]",
			`policy: conversations.c1.flows[0].scope: must be conversation or caller, got "team"`},
		{"action", "default:\n  flows: [{after: Read, then: Bash, within: 1h, action: run}]",
			`policy: default.flows[0].action: must be ask or deny, got "run"`},
		{"unknown field", "default:\n  flows: [{after: Read, then: Bash, within: 1h, before: Write}]",
			`policy: default.flows[0].before: unknown field`},
		{"unreadable specifier", "default:\n  flows: [{after: Read, then: 'mcp__mail__send_email(*@x.com)', within: 1h}]",
			`policy: default.flows[0].then: "mcp__mail__send_email(*@x.com)": mcp__mail__send_email is not a built-in tool`},
		{"twice", "default:\n  flows:\n    - {after: Read, then: Bash, within: 1h}\n    - {after: Read, then: Bash, within: 2h, action: deny}",
			`policy: default.flows[1]: holds back the same calls as default.flows[0] (the same after, then and scope): make it one flow`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, machine.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// flakyMarks is MemoryFlowMarks whose reads can fail.
type flakyMarks struct {
	MemoryFlowMarks
	err error
}

func (f *flakyMarks) Last(ctx context.Context, key FlowKey) (FlowMark, bool, error) {
	if f.err != nil {
		return FlowMark{}, false, f.err
	}
	return f.MemoryFlowMarks.Last(ctx, key)
}

const flowDocument = `
default:
  requiresApprovalTools: none
  matchArgument: {mcp__mail__send_email: to}
  rules:
    allow: [mcp__mail__send_email]
  flows:
    - after: mcp__mail__read_inbox
      then: mcp__mail__send_email
      unless: ["mcp__mail__send_email(*@example.com)"]
      within: 1h
      reason: mail read from the inbox may leave the company
    - {after: "Bash(cat ./secrets/*)", then: "WebFetch", within: 10m, scope: caller, action: deny}
`

func TestFlows_HoldBackTheSecondCallOfASequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	doc, err := Parse([]byte(flowDocument))
	require.NoError(t, err)
	marks := &flakyMarks{}
	e, err := NewEngine(doc, nil, nil, WithFlowMarks(marks), WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	require.True(t, e.HasFlows())
	require.Len(t, e.FlowRules(), 2)

	send := func(conv, caller, to string) machine.Verdict {
		t.Helper()
		v, err := e.Evaluate(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: conv, CallerBotID: caller,
			Arguments: []byte(`{"to":"` + to + `"}`)})
		require.NoError(t, err)
		return v
	}
	// Nothing read yet: the allow rule runs it.
	assert.Equal(t, machine.ActionRun, send("A", "bot", "eve@evil.test").Action)

	// A read that completes in conversation A marks A only.
	read := machine.Call{ToolName: "mcp__mail__read_inbox", ConversationID: "A", CallerBotID: "bot", Arguments: []byte(`{}`)}
	require.NoError(t, e.MarkCompleted(ctx, read, "A.t1"))
	v := send("A", "bot", "eve@evil.test")
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Equal(t, machine.DecidedByRule, v.DecidedBy)
	assert.Equal(t, `flows[0] "mcp__mail__read_inbox" → "mcp__mail__send_email" (default): follows mcp__mail__read_inbox (A.t1), `+
		`completed 2026-11-01T12:00:00Z, within 1h: mail read from the inbox may leave the company`, v.Reason)
	assert.Equal(t, machine.ActionRun, send("B", "bot", "eve@evil.test").Action, "another conversation")
	assert.Equal(t, machine.ActionRun, send("A", "bot", "bob@example.com").Action, "unless: an inside address")

	// A recipient list is not a string the unless pattern can read: held.
	v, err = e.Evaluate(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: "A",
		Arguments: []byte(`{"to":["bob@example.com"]}`)})
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action)

	// Explain names the flow and the earlier call.
	x, err := e.Explain(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: "A", Arguments: []byte(`{"to":"eve@evil.test"}`)})
	require.NoError(t, err)
	require.Len(t, x.Flows, 1)
	assert.True(t, x.Flows[0].Decided)
	assert.True(t, x.Flows[0].Marked)
	assert.Equal(t, "A.t1", x.Flows[0].Mark.PendingID)
	assert.Contains(t, x.Flows[0].Why, "follows mcp__mail__read_inbox (A.t1)")
	x, err = e.Explain(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: "B", Arguments: []byte(`{"to":"eve@evil.test"}`)})
	require.NoError(t, err)
	require.Len(t, x.Flows, 1)
	assert.False(t, x.Flows[0].Marked)
	assert.Equal(t, `no call of "mcp__mail__read_inbox" completed in conversation B within the last 1h`, x.Flows[0].Why)

	// The window passes.
	now = now.Add(time.Hour)
	assert.Equal(t, machine.ActionRun, send("A", "bot", "eve@evil.test").Action, "after within")

	// A caller flow: a Bash line with a command it matches marks the
	// caller, in whatever conversation; deny.
	cat := machine.Call{ToolName: "Bash", ConversationID: "C", CallerBotID: "bot-2", Arguments: []byte(`{"command":"cat ./secrets/key && echo ok"}`)}
	require.NoError(t, e.MarkCompleted(ctx, cat, "C.t9"))
	fetch := func(caller string) machine.Verdict {
		v, err := e.Evaluate(ctx, machine.Call{ToolName: "WebFetch", ConversationID: "D", CallerBotID: caller,
			Arguments: []byte(`{"url":"https://x.test/"}`)})
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, machine.ActionDeny, fetch("bot-2").Action)
	assert.Contains(t, fetch("bot-2").Reason, "follows Bash (C.t9)")
	assert.Equal(t, machine.ActionRun, fetch("bot-3").Action, "another caller")

	// A mark that cannot be read asks, saying why; never runs.
	marks.err = errors.New("bucket unavailable")
	v = send("B", "bot", "eve@evil.test")
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Contains(t, v.Reason, "cannot read whether conversation B completed a call of \"mcp__mail__read_inbox\" within 1h, so a human decides: bucket unavailable")
	assert.Equal(t, machine.ActionRun, send("B", "bot", "bob@example.com").Action, "exempt: no mark read")

	// Without a store of marks, a held call asks.
	bare, err := NewEngine(doc, nil, nil)
	require.NoError(t, err)
	v, err = bare.Evaluate(ctx, machine.Call{ToolName: "mcp__mail__send_email", ConversationID: "Z", Arguments: []byte(`{"to":"x@y.z"}`)})
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Contains(t, v.Reason, "no store of flow marks is configured")
}

// TestDocs_FlowsExample: the example of docs/policy.md's flows section
// does what the section says: after the inbox is read in a conversation,
// a send to an outside address there asks, to an inside one runs, and in
// another conversation runs; a fetch after a secret was read by the same
// caller is denied, in any conversation.
func TestDocs_FlowsExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	page, err := os.ReadFile("../docs/policy.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(page), "\n## Flows: `flows:`\n")
	require.True(t, ok, "docs/policy.md has a flows section")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, m, "the flows section has a YAML example")
	doc, err := Parse([]byte(m[1]))
	require.NoError(t, err)
	e, err := NewEngine(doc, nil, nil, WithFlowMarks(&MemoryFlowMarks{}))
	require.NoError(t, err)

	eval := func(tool, conv, caller, args string) machine.Verdict {
		t.Helper()
		v, err := e.Evaluate(ctx, machine.Call{ToolName: tool, ConversationID: conv, CallerBotID: caller, Arguments: []byte(args)})
		require.NoError(t, err)
		return v
	}
	require.NoError(t, e.MarkCompleted(ctx, machine.Call{ToolName: "mcp__mail__read_inbox", ConversationID: "c1", CallerBotID: "bot",
		Arguments: []byte(`{}`)}, "c1.t7"))
	v := eval("mcp__mail__send_email", "c1", "bot", `{"to":"eve@evil.test"}`)
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Contains(t, v.Reason, `flows[0] "mcp__mail__read_inbox" → "mcp__mail__send_email" (default): follows mcp__mail__read_inbox (c1.t7), completed `)
	assert.Equal(t, machine.ActionRun, eval("mcp__mail__send_email", "c1", "bot", `{"to":"bob@example.com"}`).Action)
	assert.Equal(t, machine.ActionRun, eval("mcp__mail__send_email", "c2", "bot", `{"to":"eve@evil.test"}`).Action)

	require.NoError(t, e.MarkCompleted(ctx, machine.Call{ToolName: "Bash", ConversationID: "c3", CallerBotID: "bot-2",
		Arguments: []byte(`{"command":"cat ./secrets/token"}`)}, "c3.t1"))
	assert.Equal(t, machine.ActionDeny, eval("WebFetch", "c4", "bot-2", `{"url":"https://x.test/"}`).Action)
	assert.NotEqual(t, machine.ActionDeny, eval("WebFetch", "c4", "bot", `{"url":"https://x.test/"}`).Action)
}

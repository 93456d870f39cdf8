package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// TestCLI_AnEditIsCheckedAgainstThePolicy: an approver's edit is evaluated
// as a submission of the edited call would be. One a deny rule matches is
// refused naming the rule, and the call stays pending as it was; one the
// rules allow is approved, and show says what changed; a tool marked
// editable: false takes no edit at all.
func TestCLI_AnEditIsCheckedAgainstThePolicy(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, `
default:
  requiresApprovalTools: [deploy]
  editable: {deploy: false}
  rules:
    deny: ["Bash(rm -rf *)"]
    ask: ["Bash(git push *)"]
`)
	ctx := t.Context()
	bot := agent(t, url)
	e, err := bot.Submit(ctx, bashCall("conv-e", "push", "git push origin main"))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	r := cli(t, url, "approve", e.PendingID, as(t, url, "alice"), "--args", `{"command":"rm -rf /tmp/zzz"}`)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, `edit denied by policy: the edited call is denied by rules.deny "Bash(rm -rf *)" (default)`)
	got, err := bot.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "the refused edit changed nothing")
	assert.JSONEq(t, `{"command":"git push origin main"}`, string(got.ToolArguments))

	// Hidden in a line the rule still sees through.
	r = cli(t, url, "approve", e.PendingID, as(t, url, "alice"), "--args", `{"command":"git push origin main && rm -rf /"}`)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, `rules.deny "Bash(rm -rf *)"`)

	r = cli(t, url, "approve", e.PendingID, as(t, url, "alice"), "--args", `{"command":"git push origin staging"}`)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, url, "show", e.PendingID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `Status:\s+APPROVED_READY_FOR_EXECUTION`, r.stdout)
	assert.Regexp(t, `Arguments:\s+\{"command":"git push origin staging"\}`, r.stdout)
	assert.Regexp(t, `Original arguments:\s+\{"command":"git push origin main"\} \(edited by the approver\)`, r.stdout)
	assert.Regexp(t, `Edited:\s+command \(sha256:[0-9a-f]{64} -> sha256:[0-9a-f]{64}\)`, r.stdout)

	// The approval's transition records the edit, for the history and
	// the event stream.
	r = cli(t, url, "show", e.PendingID, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var shown machine.Entry
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	require.NotNil(t, shown.LastTransition)
	require.NotNil(t, shown.LastTransition.Edit)
	assert.Equal(t, []string{"command"}, shown.LastTransition.Edit.Changed)
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{"command":"git push origin main"}`)), shown.LastTransition.Edit.From)
	assert.Equal(t, machine.ArgumentsDigest(json.RawMessage(`{ "command": "git push origin staging" }`)), shown.LastTransition.Edit.To)

	// A tool that may not be edited is approved as asked, or not at all.
	deploy, err := bot.Submit(ctx, machine.Call{ToolCallID: "d", ToolName: "deploy", Arguments: json.RawMessage(`{"env":"staging"}`), CallerBotID: "bot-1", ConversationID: "conv-e"})
	require.NoError(t, err)
	r = cli(t, url, "approve", deploy.PendingID, as(t, url, "alice"), "--args", `{"env":"prod"}`)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, `editable["deploy"] false (default)`)
	r = cli(t, url, "approve", deploy.PendingID, as(t, url, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
}

package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// TestParseCandidate_TakesARedactedDocument: a document as `policy get`
// shows it to an approver or viewer (its secrets "[redacted]") can be
// tried, without its notify lists; Parse refuses it, and a candidate
// wrong in anything else is refused naming the field, placeholders too.
func TestParseCandidate_TakesARedactedDocument(t *testing.T) {
	t.Parallel()
	redacted := `
default:
  requiresApprovalTools: [deploy]
  notify: [{type: webhook, url: "https://hooks.example.com/x", secret: "[redacted]"}]
teams:
  ops:
    notify: [{type: slack, url: "[redacted]"}]
`
	_, err := policy.Parse([]byte(redacted))
	require.ErrorIs(t, err, machine.ErrInvalid, "policy set refuses it")
	doc, err := policy.ParseCandidate([]byte(redacted))
	require.NoError(t, err)
	assert.Nil(t, doc.Default.Notify, "evaluated without its notify lists")
	assert.Equal(t, []string{"deploy"}, doc.Default.RequiresApprovalTools.Tools, "the rest as written")

	plain, err := policy.ParseCandidate([]byte("default: {requiresApprovalTools: [deploy], notify: [{type: webhook, url: \"https://h.example.com\", secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}]}\n"))
	require.NoError(t, err)
	assert.Len(t, plain.Default.Notify, 1, "a valid document is taken whole")

	_, err = policy.ParseCandidate([]byte(redacted + "    requiresApprovalTool: [x]\n"))
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.Contains(t, err.Error(), "teams.ops.requiresApprovalTool: unknown field", "a field no policy has is named")
	_, err = policy.ParseCandidate([]byte(redacted + "    approvalTimeoutMs: -1\n"))
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.Contains(t, err.Error(), "teams.ops.approvalTimeoutMs", "a value out of range is named")
	assert.Contains(t, err.Error(), "teams.ops.notify[0].url", "and so are the placeholders beside it")
}

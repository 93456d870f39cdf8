package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestPolicyDryRun_OverHTTP: POST /v1/policy/dry-run replays the calls
// submitted over HTTP through a candidate and answers the counts worked
// out by hand; a candidate left redacted is taken, a bad one refused with
// 400 naming the field, and an agent refused with 403.
func TestPolicyDryRun_OverHTTP(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake", "http"}, Tokens: tokens, Policy: `
default:
  requiresApprovalTools: [web_search]
  matchArgument: {web_search: query}
  rules: {deny: ["web_search(forbidden *)"]}
`})
	h := &harness{t: t, url: g.HTTPURL}
	// 40 calls: per 4, two searches (ask), a forbidden one (deny) and a
	// summary (allow).
	var eg errgroup.Group
	eg.SetLimit(8)
	for i := range 40 {
		eg.Go(func() error {
			c := machine.Call{ToolCallID: fmt.Sprintf("c%d", i), ToolName: "web_search", ConversationID: "dry",
				Arguments: json.RawMessage(fmt.Sprintf(`{"query":"q%d"}`, i))}
			switch i % 4 {
			case 2:
				c.Arguments = json.RawMessage(fmt.Sprintf(`{"query":"forbidden %d"}`, i))
			case 3:
				c.ToolName, c.Arguments = "summarize", nil
			}
			if status := h.do("POST", "/v1/tool-calls", "agent-token-000000001", c, nil); status != http.StatusCreated {
				return fmt.Errorf("submit %d: %d", i, status)
			}
			return nil
		})
	}
	require.NoError(t, eg.Wait())

	// The candidate asks about summaries instead of searches; its webhook
	// secret is left as policy get shows it to a viewer.
	candidate := `
default:
  requiresApprovalTools: [summarize]
  matchArgument: {web_search: query}
  rules: {deny: ["web_search(forbidden *)"]}
  notify: [{type: webhook, url: "https://hooks.example.com/t", secret: "[redacted]"}]
`
	var reply wire.PolicyDryRunReply
	require.Equal(t, http.StatusOK, h.do("POST", "/v1/policy/dry-run", "viewer-token-00000001",
		wire.PolicyDryRunRequest{Document: candidate, Examples: 3}, &reply))
	assert.Equal(t, 40, reply.Calls)
	assert.Equal(t, 30, reply.Changed)
	assert.Equal(t, []wire.VerdictCount{
		{From: "allow", To: "ask", Calls: 10}, {From: "ask", To: "allow", Calls: 20}, {From: "deny", To: "deny", Calls: 10},
	}, reply.Verdicts)
	assert.Equal(t, []wire.DryRunGroup{
		{Name: "web_search", Calls: 30, Changed: 20, Verdicts: []wire.VerdictCount{{From: "ask", To: "allow", Calls: 20}, {From: "deny", To: "deny", Calls: 10}}},
		{Name: "summarize", Calls: 10, Changed: 10, Verdicts: []wire.VerdictCount{{From: "allow", To: "ask", Calls: 10}}},
	}, reply.ByTool)
	require.Len(t, reply.Examples, 6, "3 of each change")
	assert.Equal(t, "summarize", reply.Examples[0].ToolName)
	assert.Equal(t, "requiresApprovalTools (default)", reply.Examples[0].CandidateReason)
	assert.Equal(t, "web_search", reply.Examples[3].ToolName)

	for _, c := range []struct {
		token, document string
		status          int
		code, message   string
	}{
		{"viewer-token-00000001", "default: {approvalTimeoutMs: -1}", http.StatusBadRequest, "invalid", "candidate policy: default.approvalTimeoutMs"},
		{"alice-token-000000001", "default: {requiresApprovalTool: [x]}", http.StatusBadRequest, "invalid", "default.requiresApprovalTool: unknown field"},
		{"agent-token-000000001", candidate, http.StatusForbidden, "forbidden", "needs one of the roles"},
	} {
		var body httpapi.ErrorBody
		assert.Equal(t, c.status, h.do("POST", "/v1/policy/dry-run", c.token, wire.PolicyDryRunRequest{Document: c.document}, &body), c.document)
		assert.Equal(t, c.code, body.Error.Code)
		assert.Contains(t, body.Error.Message, c.message)
	}
}

package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestPolicyExplain_OverHTTP: POST /v1/policy/explain says how the policy
// in force decides a call, which rule matched and against which argument:
// a write to /etc/cron.d whose content looks like /tmp is not allowed;
// a call without the argument is denied by the rule that cannot read it.
// Nothing is submitted, and an agent is refused.
func TestPolicyExplain_OverHTTP(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake", "http"}, Tokens: tokens, Policy: `
default:
  rules:
    deny: ["mcp__files__write_file(/srv/secret/**)"]
    allow: ["mcp__files__write_file(/tmp/**)"]
  matchArgument: {mcp__files: path}
`})
	h := &harness{t: t, url: g.HTTPURL}
	explain := func(args string) wire.PolicyExplainReply {
		t.Helper()
		var reply wire.PolicyExplainReply
		require.Equal(t, http.StatusOK, h.do("POST", "/v1/policy/explain", "viewer-token-00000001",
			wire.PolicyExplainRequest{ToolName: "mcp__files__write_file", Arguments: json.RawMessage(args)}, &reply))
		return reply
	}

	r := explain(`{"path":"/etc/cron.d/evil","content":"/tmp/x"}`)
	assert.Equal(t, "ask", r.Verdict, r.Reason)
	assert.Equal(t, "path", r.Argument)
	assert.Equal(t, "/etc/cron.d/evil", r.Value)
	assert.Positive(t, r.PolicyRevision)
	assert.Equal(t, []wire.ExplainedRule{
		{Scope: "default", Kind: "deny", Index: 0, Pattern: "mcp__files__write_file(/srv/secret/**)", Why: "it does not match path"},
		{Scope: "default", Kind: "allow", Index: 0, Pattern: "mcp__files__write_file(/tmp/**)", Why: "it does not match path"},
	}, r.Rules)

	r = explain(`{"path":"/tmp/ok.txt","content":"x"}`)
	assert.Equal(t, "allow", r.Verdict)
	assert.True(t, r.Rules[1].Matched && r.Rules[1].Decided, "%+v", r.Rules)

	r = explain(`{"content":"/tmp/x"}`)
	assert.Equal(t, "deny", r.Verdict)
	assert.Equal(t, "the call has no path argument", r.Unreadable)
	assert.Contains(t, r.Reason, "could not read the call's argument (the call has no path argument)")

	for _, c := range []struct {
		token  string
		req    wire.PolicyExplainRequest
		status int
		msg    string
	}{
		{"viewer-token-00000001", wire.PolicyExplainRequest{ToolName: "x", Arguments: json.RawMessage(`[1]`)}, http.StatusBadRequest, "toolArguments: must be a JSON object"},
		{"viewer-token-00000001", wire.PolicyExplainRequest{ToolName: "not a tool"}, http.StatusBadRequest, "toolName"},
		{"viewer-token-00000001", wire.PolicyExplainRequest{ToolName: "x", PermissionMode: "yolo"}, http.StatusBadRequest, "permissionMode"},
		{"agent-token-000000001", wire.PolicyExplainRequest{ToolName: "x"}, http.StatusForbidden, "needs one of the roles"},
	} {
		var body httpapi.ErrorBody
		assert.Equal(t, c.status, h.do("POST", "/v1/policy/explain", c.token, c.req, &body), c.msg)
		assert.Contains(t, body.Error.Message, c.msg)
	}
	var list wire.ListReply
	require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls", "viewer-token-00000001", nil, &list))
	assert.Empty(t, list.Items, "nothing was submitted")
}

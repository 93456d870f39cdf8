package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestAPI_GrantPreviewAndDecidingTheCallsNamed: GET
// /v1/tool-calls/{id}/grant-preview answers approvers and viewers with
// the pattern a grant of the scope would record, refuses an agent and a
// scope that records none, and decides nothing; POST /v1/decisions with
// ids decides the calls named and accounts for each.
func TestAPI_GrantPreviewAndDecidingTheCallsNamed(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	a, b := h.submit("sel", "a"), h.submit("sel", "b")

	for _, token := range []string{"alice-token-000000001", "viewer-token-00000001"} {
		var p wire.GrantPreview
		require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+a.PendingID+"/grant-preview?scope=session", token, nil, &p))
		assert.Equal(t, wire.GrantPreview{PendingID: a.PendingID, ToolName: "web_search", Scope: machine.ScopeSession, Pattern: "web_search", ConversationID: "sel", Argument: "query"}, p)
	}
	var body httpapi.ErrorBody
	assert.Equal(t, http.StatusBadRequest, h.do("GET", "/v1/tool-calls/"+a.PendingID+"/grant-preview?scope=once", "alice-token-000000001", nil, &body))
	assert.Contains(t, body.Error.Message, "an approval once records no grant")
	assert.Equal(t, http.StatusBadRequest, h.do("GET", "/v1/tool-calls/"+a.PendingID+"/grant-preview", "alice-token-000000001", nil, &body))
	assert.Equal(t, http.StatusNotFound, h.do("GET", "/v1/tool-calls/sel.nope/grant-preview?scope=always", "alice-token-000000001", nil, nil))
	assert.Equal(t, http.StatusForbidden, h.do("GET", "/v1/tool-calls/"+a.PendingID+"/grant-preview?scope=session", "agent-token-000000001", nil, nil))

	var reply wire.DecideMatchingReply
	require.Equal(t, http.StatusOK, h.do("POST", "/v1/decisions", "alice-token-000000001",
		wire.DecideMatchingRequest{IDs: []string{a.PendingID, "sel.nope"}, Approved: true}, &reply))
	require.Len(t, reply.Decided, 1)
	assert.Equal(t, a.PendingID, reply.Decided[0].PendingID)
	assert.Equal(t, "alice", reply.Decided[0].Entry.ApprovedOrRejectedByUserID)
	require.Len(t, reply.Skipped, 1)
	assert.Equal(t, "not_found", reply.Skipped[0].Code)
	var still machine.Entry
	require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+b.PendingID, "alice-token-000000001", nil, &still))
	assert.Equal(t, machine.StatePendingApproval, still.Status, "a call not named is not decided")
	assert.Equal(t, http.StatusForbidden, h.do("POST", "/v1/decisions", "viewer-token-00000001",
		wire.DecideMatchingRequest{IDs: []string{b.PendingID}, Approved: true}, nil), "a viewer decides nothing")
	assert.Equal(t, http.StatusBadRequest, h.do("POST", "/v1/decisions", "alice-token-000000001",
		wire.DecideMatchingRequest{Approved: true}, &body))
	assert.Contains(t, body.Error.Message, "match or ids: one is required")
}

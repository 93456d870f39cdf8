package httpapi_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestBounds_HTTPAndNATSRefuseTheSameInputs: each input one transport
// refuses, the other refuses too, with the same status, code and message,
// and the call is left as it was: a negative lease, a negative cost, a
// field a report of that kind does not take, an over-long requestId and a
// decision that does not say approved. Each would otherwise be taken: the
// call is approved when the claims are refused, running when the
// outcomes are, pending when the decisions are.
func TestBounds_HTTPAndNATSRefuseTheSameInputs(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"intake", "http"}, Tokens: tokens, Policy: testPolicy})
	h := &harness{t: t, url: g.HTTPURL}
	nc, _ := g.ConnectAs(t, "admin")
	const admin = "admin-token-000000001"

	call := func(id string) machine.Entry {
		var e machine.Entry
		require.Equal(t, http.StatusCreated, h.do("POST", "/v1/tool-calls", "agent-token-000000001",
			machine.Call{ToolCallID: id, ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "bounds"}, &e))
		require.Equal(t, machine.StatePendingApproval, e.Status)
		return e
	}
	pending, approved, running := call("pending"), call("approved"), call("running")
	for _, e := range []machine.Entry{approved, running} {
		require.Equal(t, http.StatusOK, h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "alice-token-000000001", wire.DecideRequest{Approved: true}, nil))
	}
	require.Equal(t, http.StatusOK, h.do("POST", "/v1/tool-calls/"+running.PendingID+"/started", admin, map[string]any{}, &running))
	require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+approved.PendingID, admin, nil, &approved))
	require.Equal(t, machine.StateApproved, approved.Status)
	require.Equal(t, machine.StateExecuting, running.Status)

	for _, c := range []struct {
		name     string
		call     machine.Entry
		endpoint string // the request API's, and the HTTP route's last segment
		body     map[string]any
		want     string
	}{
		{"a negative lease on a claim", approved, wire.EndpointStarted, map[string]any{"leaseMs": -5}, "leaseMs: want a positive number of milliseconds"},
		{"a negative lease on a heartbeat", running, wire.EndpointHeartbeat, map[string]any{"leaseMs": -1}, "leaseMs: want a positive number of milliseconds"},
		{"a result on a heartbeat", running, wire.EndpointHeartbeat, map[string]any{"result": map[string]int{"hits": 3}}, "result: a report of heartbeat takes only leaseMs"},
		{"a cost on a claim", approved, wire.EndpointStarted, map[string]any{"cost": 2}, "cost: a report of started takes only leaseMs, revision"},
		{"a negative cost", running, wire.EndpointSucceeded, map[string]any{"result": "done", "cost": -1}, "cost: must be >= 0, got -1"},
		{"a negative cost of a failure", running, wire.EndpointFailed, map[string]any{"error": "down", "cost": -0.5}, "cost: must be >= 0, got -0.5"},
		{"an over-long requestId", pending, "decision", map[string]any{"approved": true, "requestId": strings.Repeat("r", 65)}, "requestId: at most 64 bytes, got 65"},
		{"a decision without approved", pending, "decision", map[string]any{"reason": "looks fine"}, "approved: required, true or false"},
		{"a decision with approved null", pending, "decision", map[string]any{"approved": nil}, "approved: required, true or false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var overHTTP httpapi.ErrorBody
			status := h.do("POST", "/v1/tool-calls/"+c.call.PendingID+"/"+c.endpoint, admin, c.body, &overHTTP)

			endpoint := c.endpoint
			if endpoint == "decision" {
				endpoint = wire.EndpointDecide
			}
			body := maps.Clone(c.body)
			body["pendingId"] = c.call.PendingID
			data, err := json.Marshal(body)
			require.NoError(t, err)
			msg, err := nc.Request(wire.APISubject(endpoint), data, 30*time.Second)
			require.NoError(t, err)
			var apiErr *wire.APIError
			require.ErrorAs(t, wire.DecodeReply(msg.Header, msg.Data, &machine.Entry{}), &apiErr, "refused over NATS")

			assert.Equal(t, http.StatusBadRequest, status, "over HTTP: %s", overHTTP.Error.Message)
			assert.Equal(t, "invalid", overHTTP.Error.Code)
			assert.Contains(t, overHTTP.Error.Message, c.want)
			assert.Equal(t, status, apiErr.Status, "the same status over NATS")
			assert.Equal(t, overHTTP.Error.Code, apiErr.Code, "the same code over NATS")
			assert.Equal(t, overHTTP.Error.Message, apiErr.Message, "the same message over NATS")

			var now machine.Entry
			require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+c.call.PendingID, admin, nil, &now))
			assert.Equal(t, c.call.Status, now.Status, "the call is as it was")
		})
	}
}

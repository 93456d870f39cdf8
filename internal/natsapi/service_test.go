package natsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/natsapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// startService serves the request API over a machine that asks about
// every call except tools named run_*, which it runs at once.
func startService(t *testing.T) (*bustest.Env, *natsapi.Service) {
	t.Helper()
	env := bustest.Start(t, bustest.Topologies[0])
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Log: bustest.Logger(),
		Policy: machine.EvaluatorFunc(func(_ context.Context, c machine.Call) (machine.Verdict, error) {
			if len(c.ToolName) > 4 && c.ToolName[:4] == "run_" {
				return machine.Verdict{Action: machine.ActionRun}, nil
			}
			return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute, Approvers: []string{"alice", "bob"}}, nil
		})})
	svc := natsapi.New(g, bustest.Logger())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, env.NC, "0.0.1-test") }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, stopWaiting := context.WithTimeout(t.Context(), 10*time.Second)
	defer stopWaiting()
	require.NoError(t, natsapi.WaitReady(wctx, env.NC), "the request API never served every endpoint")
	return env, svc
}

// call makes a request and decodes its reply into T.
func request[T any](t *testing.T, nc *nats.Conn, endpoint string, body any) (T, error) {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	msg, err := nc.Request(wire.APISubject(endpoint), data, 30*time.Second)
	require.NoError(t, err)
	var v T
	return v, wire.DecodeReply(msg.Header, msg.Data, &v)
}

func TestService_DiscoverableAsMicroService(t *testing.T) {
	t.Parallel()
	env, _ := startService(t)
	want := []string{wire.EndpointSubmit, wire.EndpointGet, wire.EndpointList, wire.EndpointDecide, wire.EndpointCancel,
		wire.EndpointCancelConversation, wire.EndpointStarted, wire.EndpointHeartbeat, wire.EndpointSucceeded, wire.EndpointFailed}
	// Every instance answers `nats micro info`, and lists every endpoint
	// once it has added them all, a moment after it started answering.
	var missing []string
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "every instance lists every endpoint", func() (bool, any) {
		missing = nil
		for _, info := range askAll[micro.Info](t, env.NC, "$SRV.INFO.toolgate") {
			assert.Equal(t, "toolgate", info.Name)
			subjects := map[string]bool{}
			for _, e := range info.Endpoints {
				subjects[e.Subject] = true
			}
			for _, ep := range want {
				if !subjects[wire.APISubject(ep)] {
					missing = append(missing, info.ID+": "+ep)
				}
			}
		}
		return len(missing) == 0, fmt.Sprintf("not listed: %v", missing)
	})
}

func TestService_SubmitDecideAndRefusals(t *testing.T) {
	t.Parallel()
	env, _ := startService(t)
	nc := env.NC
	call := machine.Call{ToolCallID: "c1", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), CallerBotID: "bot", ConversationID: "svc"}
	e, err := request[machine.Entry](t, nc, wire.EndpointSubmit, call)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status)

	again, err := request[machine.Entry](t, nc, wire.EndpointSubmit, call)
	require.NoError(t, err)
	assert.Equal(t, e.PendingID, again.PendingID, "a retried submit returns the same entry")

	got, err := request[machine.Entry](t, nc, wire.EndpointGet, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, e.PendingID, got.PendingID)

	_, err = request[machine.Entry](t, nc, wire.EndpointDecide, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "mallory"})
	assertAPIError(t, err, 403, machine.ErrForbidden, "mallory")

	decided, err := request[machine.Entry](t, nc, wire.EndpointDecide, wire.DecideRequest{PendingID: e.PendingID, Approved: false, By: "alice", Reason: "too costly"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, decided.Status)

	_, err = request[machine.Entry](t, nc, wire.EndpointDecide, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "bob"})
	apiErr := assertAPIError(t, err, 409, machine.ErrConflict, "REJECTED_BY_USER by alice")
	require.NotNil(t, apiErr.Entry, "a conflict carries the entry as it is now")
	assert.Equal(t, "alice", apiErr.Entry.ApprovedOrRejectedByUserID)

	_, err = request[machine.Entry](t, nc, wire.EndpointGet, wire.GetRequest{PendingID: "svc.nope"})
	assertAPIError(t, err, 404, machine.ErrNotFound, "svc.nope")
	_, err = request[machine.Entry](t, nc, wire.EndpointGet, wire.GetRequest{})
	assertAPIError(t, err, 400, machine.ErrInvalid, "pendingId: required")
	_, err = request[machine.Entry](t, nc, wire.EndpointSubmit, json.RawMessage(`{"toolName": 5}`))
	assertAPIError(t, err, 400, machine.ErrInvalid, "request body")
	_, err = request[machine.Entry](t, nc, wire.EndpointSubmit, machine.Call{ToolName: "x y", CallerBotID: "b", ConversationID: "c"})
	assertAPIError(t, err, 400, machine.ErrInvalid, "toolName")
	_, err = request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{Status: "DONE"})
	assertAPIError(t, err, 400, machine.ErrInvalid, "status")
	_, err = request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{Limit: 5000})
	assertAPIError(t, err, 400, machine.ErrInvalid, "limit")
}

func TestServiceVersionIsSemVer(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0.1.0-dev": "0.1.0-dev", "v1.2.3": "1.2.3", "v1.2.3-4-gabc123": "1.2.3-4-gabc123", "dev": "0.0.0-dev", "abc/x y": "0.0.0-abc.x.y"} {
		assert.Equal(t, want, natsapi.SemVer(in), in)
	}
}

func assertAPIError(t *testing.T, err error, status int, is error, contains string) *wire.APIError {
	t.Helper()
	var apiErr *wire.APIError
	require.True(t, errors.As(err, &apiErr), "want an API error, got %v", err)
	assert.Equal(t, status, apiErr.Status)
	assert.ErrorIs(t, err, is)
	assert.Contains(t, apiErr.Message, contains)
	return apiErr
}

func TestService_ListAndCancelConversation(t *testing.T) {
	t.Parallel()
	env, _ := startService(t)
	nc := env.NC
	submit := func(conv, id, tool string) machine.Entry {
		e, err := request[machine.Entry](t, nc, wire.EndpointSubmit, machine.Call{ToolCallID: id, ToolName: tool, CallerBotID: "bot-" + conv, ConversationID: conv})
		require.NoError(t, err)
		return e
	}
	submit("swarm", "a", "web_search")
	submit("swarm", "b", "send_email")
	running := submit("swarm", "c", "run_report")
	submit("other", "a", "web_search")

	list, err := request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{ConversationID: "swarm", Status: machine.StatePendingApproval})
	require.NoError(t, err)
	assert.Len(t, list.Items, 2)
	list, err = request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{ToolName: "web_search"})
	require.NoError(t, err)
	assert.Len(t, list.Items, 2, "across conversations")
	list, err = request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{CallerBotID: "bot-other"})
	require.NoError(t, err)
	assert.Len(t, list.Items, 1)
	page, err := request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{Limit: 3})
	require.NoError(t, err)
	require.Len(t, page.Items, 3)
	rest, err := request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{Limit: 3, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Len(t, rest.Items, 1, "the second page holds the rest")
	assert.Empty(t, rest.NextCursor)

	// The run_ call is being run by the agent itself.
	started, err := request[machine.Entry](t, nc, wire.EndpointStarted, wire.ReportRequest{PendingID: running.PendingID, By: "bot-swarm"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateExecuting, started.Status)
	renewed, err := request[machine.Entry](t, nc, wire.EndpointHeartbeat, wire.ReportRequest{PendingID: running.PendingID, By: "bot-swarm", LeaseMs: 3 * time.Hour.Milliseconds()})
	require.NoError(t, err)
	assert.Greater(t, renewed.Lease.ExpiresAt, started.Lease.ExpiresAt+time.Hour.Milliseconds())
	_, err = request[machine.Entry](t, nc, wire.EndpointHeartbeat, wire.ReportRequest{PendingID: running.PendingID, By: "someone-else"})
	assertAPIError(t, err, 409, machine.ErrConflict, "heartbeat not allowed")

	reply, err := request[wire.CancelConversationReply](t, nc, wire.EndpointCancelConversation, wire.CancelRequest{ConversationID: "swarm", By: "ops", Reason: "swarm stopped"})
	require.NoError(t, err)
	assert.Len(t, reply.Cancelled, 2)
	require.Len(t, reply.Running, 1)
	assert.Equal(t, running.PendingID, reply.Running[0].PendingID)

	other, err := request[wire.ListReply](t, nc, wire.EndpointList, wire.ListRequest{ConversationID: "other"})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, other.Items[0].Status, "other conversations are untouched")

	done, err := request[machine.Entry](t, nc, wire.EndpointSucceeded, wire.ReportRequest{PendingID: running.PendingID, By: "bot-swarm", Result: json.RawMessage(`{"rows":3}`), Cost: 0.5})
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, done.Status)
	assert.InDelta(t, 0.5, done.Cost, 1e-9)
}

// askAll asks every instance of the service on nc's server, asking again
// until each has answered: an instance still starting answers a later
// request, not one sent before it subscribed.
func askAll[T any](t *testing.T, nc *nats.Conn, subject string) []T {
	t.Helper()
	byID := map[string]T{}
	deadline := time.Now().Add(30 * time.Second)
	for len(byID) < natsapi.Instances {
		require.True(t, time.Now().Before(deadline), "%d of %d instances answered %s", len(byID), natsapi.Instances, subject)
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		require.NoError(t, err)
		require.NoError(t, nc.PublishRequest(subject, inbox, nil))
		for len(byID) < natsapi.Instances {
			msg, err := sub.NextMsg(time.Second)
			if err != nil {
				break // the rest are asked again
			}
			var id struct {
				ID string `json:"id"`
			}
			var v T
			require.NoError(t, json.Unmarshal(msg.Data, &id))
			require.NoError(t, json.Unmarshal(msg.Data, &v))
			byID[id.ID] = v
		}
		require.NoError(t, sub.Unsubscribe())
	}
	return slices.Collect(maps.Values(byID))
}

// `nats micro stats toolgate` is true: a refusal counts as an error of
// its endpoint, and each endpoint's metadata names what it reads and
// answers.
func TestService_StatsCountRefusalsAndEndpointsNameTheirTypes(t *testing.T) {
	t.Parallel()
	env, _ := startService(t)
	_, err := request[machine.Entry](t, env.NC, wire.EndpointGet, wire.GetRequest{PendingID: "svc.nope"})
	assertAPIError(t, err, 404, machine.ErrNotFound, "svc.nope")
	_, err = request[machine.Entry](t, env.NC, wire.EndpointSubmit, machine.Call{ToolCallID: "c1", ToolName: "run_it", CallerBotID: "bot", ConversationID: "stats"})
	require.NoError(t, err)

	counts := map[string][2]int{} // endpoint: requests, errors
	for _, s := range askAll[micro.Stats](t, env.NC, "$SRV.STATS.toolgate") {
		for _, e := range s.Endpoints {
			c := counts[e.Subject]
			counts[e.Subject] = [2]int{c[0] + e.NumRequests, c[1] + e.NumErrors}
		}
	}
	assert.Equal(t, [2]int{1, 1}, counts[wire.APISubject(wire.EndpointGet)], "get: one request, refused")
	assert.Equal(t, [2]int{1, 0}, counts[wire.APISubject(wire.EndpointSubmit)], "submit: one request, answered")

	msg, err := env.NC.Request("$SRV.INFO.toolgate", nil, 5*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(msg.Data, &info))
	md := map[string]map[string]string{}
	for _, e := range info.Endpoints {
		md[e.Name] = e.Metadata
	}
	assert.Equal(t, map[string]string{"request": "machine.Call", "reply": "machine.Entry"}, md[wire.EndpointSubmit])
	assert.Equal(t, map[string]string{"request": "wire.GetRequest", "reply": "machine.Entry"}, md[wire.EndpointGet])
	assert.Equal(t, map[string]string{"request": "wire.ListRequest", "reply": "wire.ListReply"}, md[wire.EndpointList])
}

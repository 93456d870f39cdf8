package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

const tokens = `
agent-token-000000001 bot-1 agent
agent-token-000000002 bot-2 agent
alice-token-000000001 alice approver
bob-token-00000000001 bob approver
carol-token-000000001 carol approver
viewer-token-00000001 vic viewer
admin-token-000000001 root admin
`

const testPolicy = `
default:
  requiresApprovalTools: all
  approvers: [alice, bob, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9]
  matchArgument: {web_search: query}
  rules: {deny: ["web_search(forbidden *)"]}
`

type harness struct {
	t   *testing.T
	url string
}

// start serves the API over a real embedded server with testPolicy.
func start(t *testing.T, tokenData string) *harness {
	t.Helper()
	return startInbox(t, testPolicy, tokenData).harness
}

// do sends a JSON request as the holder of token and decodes the reply.
func (h *harness) do(method, path, token string, body any, out any) int {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(h.t, err)
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.url+path, r)
	require.NoError(h.t, err)
	if body != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(h.t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

func (h *harness) submit(conv, id string) machine.Entry {
	h.t.Helper()
	var e machine.Entry
	status := h.do("POST", "/v1/tool-calls", "agent-token-000000001", machine.Call{ToolCallID: id, ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: conv}, &e)
	require.Equal(h.t, http.StatusCreated, status)
	return e
}

func TestAPI_ErrorCodes(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	e := h.submit("errors", "c1")
	assert.Equal(t, "bot-1", e.CallerBotID, "an agent submits as itself")
	var again machine.Entry
	assert.Equal(t, http.StatusOK, h.do("POST", "/v1/tool-calls", "agent-token-000000001", machine.Call{ToolCallID: "c1", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "errors"}, &again), "a retry is not a new entry")
	assert.Equal(t, e.PendingID, again.PendingID)

	check := func(name string, wantStatus int, wantCode, wantMsg string, send func(out any) int) {
		t.Run(name, func(t *testing.T) {
			var body httpapi.ErrorBody
			assert.Equal(t, wantStatus, send(&body))
			assert.Equal(t, wantCode, body.Error.Code)
			assert.Contains(t, body.Error.Message, wantMsg)
		})
	}
	check("400 names the field", 400, "invalid", "toolName", func(out any) int {
		return h.do("POST", "/v1/tool-calls", "agent-token-000000001", machine.Call{ToolName: "web search", ConversationID: "c"}, out)
	})
	check("400 unknown field", 400, "invalid", `unknown field "approve"`, func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "alice-token-000000001", map[string]any{"approve": true}, out)
	})
	check("400 approved missing", 400, "invalid", "approved: required", func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "alice-token-000000001", map[string]any{"reason": "x"}, out)
	})
	check("400 a reason over 4 KiB", 400, "invalid", "reason: at most 4096 bytes, got 4097", func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "alice-token-000000001", wire.DecideRequest{Approved: true, Reason: strings.Repeat("r", 4097)}, out)
	})
	check("400 a caller id over 256 bytes", 400, "invalid", "conversationId: at most 256 bytes", func(out any) int {
		return h.do("POST", "/v1/tool-calls", "agent-token-000000001", machine.Call{ToolName: "web_search", ConversationID: strings.Repeat("c", 300)}, out)
	})
	check("400 bad status filter", 400, "invalid", "status", func(out any) int {
		return h.do("GET", "/v1/tool-calls?status=DONE", "viewer-token-00000001", nil, out)
	})
	check("401 no token", 401, "unauthorized", "bearer token", func(out any) int {
		return h.do("GET", "/v1/tool-calls", "", nil, out)
	})
	check("401 unknown token", 401, "unauthorized", "bearer token", func(out any) int {
		return h.do("GET", "/v1/tool-calls", "nobody-token-00000001", nil, out)
	})
	check("403 viewer decides", 403, "forbidden", "vic may not POST", func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "viewer-token-00000001", wire.DecideRequest{Approved: true}, out)
	})
	check("409 the call's id for another call", 409, "idempotency_conflict", "other toolArguments", func(out any) int {
		return h.do("POST", "/v1/tool-calls", "agent-token-000000001", machine.Call{ToolCallID: "c1", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"other"}`), ConversationID: "errors"}, out)
	})
	check("403 agent submits as another", 403, "forbidden", "submits as itself", func(out any) int {
		return h.do("POST", "/v1/tool-calls", "agent-token-000000001", machine.Call{ToolName: "x", ConversationID: "c", CallerBotID: "alice"}, out)
	})
	check("403 agent approves", 403, "forbidden", "bot-1 may not", func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "agent-token-000000001", wire.DecideRequest{Approved: true}, out)
	})
	check("403 approver not allowed by policy", 403, "forbidden", "carol is not among", func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "carol-token-000000001", wire.DecideRequest{Approved: true}, out)
	})
	check("403 an edit a deny rule matches", 403, "edit_denied", `the edited call is denied by rules.deny "web_search(forbidden *)"`, func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "alice-token-000000001",
			wire.DecideRequest{Approved: true, Arguments: json.RawMessage(`{"query":"forbidden fruit"}`)}, out)
	})
	check("404", 404, "not_found", "errors.nope", func(out any) int {
		return h.do("GET", "/v1/tool-calls/errors.nope", "viewer-token-00000001", nil, out)
	})
	check("404 respond in another conversation", 404, "not_found", "conversation other", func(out any) int {
		return h.do("POST", "/v1/respond", "alice-token-000000001", wire.RespondRequest{ConversationID: "other", PendingID: e.PendingID, Approved: true}, out)
	})
	check("413", 413, "too_large", "over", func(out any) int {
		big := machine.Call{ToolName: "x", ConversationID: "c", Arguments: json.RawMessage(`{"a":"` + strings.Repeat("x", 2<<20) + `"}`)}
		return h.do("POST", "/v1/tool-calls", "agent-token-000000001", big, out)
	})
	check("415", 415, "unsupported_media_type", "application/json", func(out any) int {
		req, _ := http.NewRequest("POST", h.url+"/v1/tool-calls", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer agent-token-000000001")
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
		return resp.StatusCode
	})

	var decided machine.Entry
	require.Equal(t, 200, h.do("POST", "/v1/respond", "alice-token-000000001", wire.RespondRequest{ConversationID: "errors", PendingID: e.PendingID, Approved: true, Reason: "fine"}, &decided))
	assert.Equal(t, "alice", decided.ApprovedOrRejectedByUserID)
	check("409 says who decided", 409, "conflict", "APPROVED_READY_FOR_EXECUTION by alice", func(out any) int {
		return h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", "bob-token-00000000001", wire.DecideRequest{Approved: false}, out)
	})

	var stored machine.Entry
	require.Equal(t, 200, h.do("GET", "/v1/tool-calls/"+e.PendingID, "viewer-token-00000001", nil, &stored))
	assert.Equal(t, machine.StateApproved, stored.Status, "no refusal changed the entry")
	assert.Equal(t, "fine", stored.StatusReason)
}

func TestAPI_TenApproversOneDecisionStands(t *testing.T) {
	t.Parallel()
	var toks strings.Builder
	for i := range 10 {
		fmt.Fprintf(&toks, "approver-token-%06d a%d approver\n", i, i)
	}
	toks.WriteString("agent-token-000000001 bot-1 agent\n")
	h := start(t, toks.String())
	for round := range 5 {
		e := h.submit("race", fmt.Sprint("c", round))
		statuses := make([]int, 10)
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				approve := i%2 == 0
				statuses[i] = h.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", fmt.Sprintf("approver-token-%06d", i), wire.DecideRequest{Approved: approve}, nil)
			})
		}
		wg.Wait()
		counts := map[int]int{}
		for _, s := range statuses {
			counts[s]++
		}
		assert.Equal(t, map[int]int{200: 1, 409: 9}, counts, "round %d", round)
	}
}

func TestAPI_ListPagesHistoryAndCancel(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	var ids []string
	for i := range 5 {
		e := h.submit("paged", fmt.Sprint("c", i))
		ids = append(ids, e.PendingID)
		// Each call requested at a later millisecond than the one before.
		bustest.Eventually(t, time.Second, time.Millisecond, "the clock past the call's requestedAt", func() (bool, any) {
			now := time.Now().UnixMilli()
			return now > e.RequestedAt, fmt.Sprintf("%d, requested at %d", now, e.RequestedAt)
		})
	}
	h.submit("elsewhere", "c0")

	var got []string
	cursor := ""
	for {
		var page wire.ListPage
		require.Equal(t, 200, h.do("GET", "/v1/tool-calls?conversationId=paged&limit=2&cursor="+cursor, "viewer-token-00000001", nil, &page))
		for _, e := range page.Items {
			got = append(got, e.PendingID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	assert.Equal(t, ids, got, "every entry once, oldest first")

	require.Equal(t, 200, h.do("POST", "/v1/tool-calls/"+ids[0]+"/decision", "alice-token-000000001", wire.DecideRequest{Approved: true, Reason: "ok"}, nil))
	require.Equal(t, 200, h.do("POST", "/v1/tool-calls/"+ids[0]+"/cancel", "alice-token-000000001", wire.CancelRequest{Reason: "changed my mind"}, nil))
	var hist []wire.HistoryItem
	require.Equal(t, 200, h.do("GET", "/v1/tool-calls/"+ids[0]+"/history", "viewer-token-00000001", nil, &hist))
	require.Len(t, hist, 3)
	assert.Equal(t, []machine.Event{machine.EventAsk, machine.EventApprove, machine.EventCancel}, []machine.Event{hist[0].Event, hist[1].Event, hist[2].Event})
	assert.Equal(t, "alice", hist[1].Actor)
	assert.Equal(t, "changed my mind", hist[2].Reason)

	var reply wire.CancelConversationReply
	require.Equal(t, 200, h.do("POST", "/v1/conversations/paged/cancel", "agent-token-000000001", nil, &reply))
	assert.Len(t, reply.Cancelled, 4)
	var page wire.ListPage
	require.Equal(t, 200, h.do("GET", "/v1/tool-calls?status=PENDING_APPROVAL", "viewer-token-00000001", nil, &page))
	require.Len(t, page.Items, 1)
	assert.Equal(t, "elsewhere", page.Items[0].ConversationID)
}

// sse reads server-sent events from the API.
type sse struct {
	resp *http.Response
	sc   *bufio.Scanner
	// closed says why the test closed the stream, if it did.
	closed atomic.Value
}

type sseEvent struct {
	id, event string
	data      wire.Event
}

func (h *harness) events(query, lastID string) *sse {
	h.t.Helper()
	return h.eventsAs("viewer-token-00000001", query, lastID)
}

func (h *harness) eventsAs(token, query, lastID string) *sse {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.url+"/v1/events"+query, nil)
	require.NoError(h.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	require.Equal(h.t, "text/event-stream", resp.Header.Get("Content-Type"))
	h.t.Cleanup(func() { resp.Body.Close() })
	return &sse{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

func (s *sse) next(t *testing.T) sseEvent {
	t.Helper()
	var ev sseEvent
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "" && ev.id != "":
			return ev
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(line[6:]), &ev.data))
		}
	}
	t.Fatalf("event stream ended: %v %v", s.sc.Err(), s.closed.Load())
	return ev
}

// TestAPI_AnAgentHearsOfItsOwnCallsOnly: an agent's token streams the
// events of its own calls, not another agent's; a viewer's, all of them.
func TestAPI_AnAgentHearsOfItsOwnCallsOnly(t *testing.T) {
	t.Parallel()
	h := start(t, tokens+"other-agent-token-0001 other-bot agent\n")
	mine := h.eventsAs("agent-token-000000001", "", "")
	all := h.events("", "")
	var theirs machine.Entry
	require.Equal(t, http.StatusCreated, h.do("POST", "/v1/tool-calls", "other-agent-token-0001",
		machine.Call{ToolCallID: "x", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "own"}, &theirs))
	own := h.submit("own", "y")
	assert.Equal(t, theirs.PendingID, all.next(t).data.Entry.PendingID)
	assert.Equal(t, own.PendingID, all.next(t).data.Entry.PendingID)
	assert.Equal(t, own.PendingID, mine.next(t).data.Entry.PendingID, "the other agent's call was left out")
	status := h.do("GET", "/v1/tool-calls/"+theirs.PendingID, "agent-token-000000001", nil, nil)
	assert.Equal(t, http.StatusNotFound, status, "nor can it read that call")
}

// TestAPI_AFilteredStreamSendsABurstAtOnce: a stream that replays a
// burst of events ending in some its filter leaves out sends the ones it
// shows at once, not at the next keep-alive (15 s later).
func TestAPI_AFilteredStreamSendsABurstAtOnce(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	shown := h.submit("shown", "c1")
	for i := range 20 {
		h.submit("hidden", fmt.Sprint("c", i))
	}
	stream := h.events("?conversationId=shown&since=0", "")
	const within = 10 * time.Second // less than the keep-alive
	timer := time.AfterFunc(within, func() {
		stream.closed.Store(fmt.Sprintf("(closed: no event within %s)", within))
		stream.resp.Body.Close()
	})
	defer timer.Stop()
	ev := stream.next(t)
	assert.Equal(t, shown.PendingID, ev.data.Entry.PendingID)
}

func TestAPI_EventsResumeWithLastEventID(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	stream := h.events("?conversationId=live", "")
	first := h.submit("live", "c1")
	h.submit("other", "c1") // filtered out
	ev := stream.next(t)
	assert.Equal(t, wire.SubjectApprovalRequired, ev.event)
	assert.Equal(t, first.PendingID, ev.data.Entry.PendingID)
	stream.resp.Body.Close()

	// Disconnected: these happen while nobody listens.
	require.Equal(t, 200, h.do("POST", "/v1/tool-calls/"+first.PendingID+"/decision", "alice-token-000000001", wire.DecideRequest{Approved: true}, nil))
	second := h.submit("live", "c2")

	resumed := h.events("?conversationId=live", ev.id)
	got := []sseEvent{resumed.next(t), resumed.next(t)}
	assert.Equal(t, wire.SubjectApprovalGranted, got[0].event)
	assert.Equal(t, first.PendingID, got[0].data.Entry.PendingID)
	assert.Equal(t, wire.SubjectApprovalRequired, got[1].event)
	assert.Equal(t, second.PendingID, got[1].data.Entry.PendingID)
}

func TestAPI_OpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.Equal(t, 200, h.do("GET", "/v1/openapi.json", "", nil, &doc))
	assert.Equal(t, "3.0.3", doc.OpenAPI)
	documented := map[[2]string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[[2]string{strings.ToUpper(method), path}] = true
		}
	}
	served := map[[2]string]bool{}
	for _, r := range httpapi.Routes() {
		served[r] = true
		assert.True(t, documented[r], "%s %s is served but not documented", r[0], r[1])
	}
	for r := range documented {
		assert.True(t, served[r], "%s %s is documented but not served", r[0], r[1])
	}
}

func TestAPI_HealthReadyMetricsOpen(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	assert.Equal(t, 200, h.do("GET", "/healthz", "", nil, nil))
	assert.Equal(t, 200, h.do("GET", "/readyz", "", nil, nil))
	resp, err := http.Get(h.url + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	open := start(t, "")
	var me httpapi.Me
	req, _ := http.NewRequest("GET", open.url+"/v1/me", nil)
	req.Header.Set("X-Toolgate-User", "alice")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&me))
	assert.Equal(t, httpapi.Me{ID: "alice", Roles: []httpapi.Role{httpapi.RoleAdmin}, Open: true}, me)
}

func TestParseTokens_NamesTheBadEntry(t *testing.T) {
	t.Parallel()
	for data, want := range map[string]string{
		"short alice approver":                     "at least 16 characters",
		"long-enough-token-01 alice approver,boss": `unknown role "boss"`,
		"long-enough-token-01 alice":               "want TOKEN USER ROLE",
	} {
		_, err := httpapi.ParseTokens([]byte(data))
		assert.ErrorContains(t, err, want)
	}
	toks, err := httpapi.ParseTokens([]byte("# a comment; with a semicolon\nlong-enough-token-01 alice approver;long-enough-token-02 bob viewer"))
	require.NoError(t, err)
	assert.False(t, toks.Open())
}

// TestAPI_Hardening: what a page elsewhere, a token in the wrong place, a
// stray path or an agent reaching past its own calls can do, and cannot.
func TestAPI_Hardening(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	mine := h.submit("shared", "mine")
	var theirs machine.Entry
	require.Equal(t, http.StatusCreated, h.do("POST", "/v1/tool-calls", "agent-token-000000002",
		machine.Call{ToolCallID: "theirs", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "shared"}, &theirs))

	raw := func(method, path string, header http.Header) (int, httpapi.ErrorBody, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, h.url+path, nil)
		require.NoError(t, err)
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body httpapi.ErrorBody
		assert.NoError(t, json.NewDecoder(resp.Body).Decode(&body), "%s %s answers JSON", method, path)
		return resp.StatusCode, body, resp.Header
	}
	bearer := func(token string, kv ...string) http.Header {
		hd := http.Header{"Authorization": {"Bearer " + token}}
		for i := 0; i < len(kv); i += 2 {
			hd.Set(kv[i], kv[i+1])
		}
		return hd
	}

	// A form a page elsewhere can post, and a request a browser marks as
	// from another origin, change nothing.
	status, body, _ := raw("POST", "/v1/conversations/shared/cancel", bearer("alice-token-000000001", "Content-Type", "text/plain"))
	assert.Equal(t, http.StatusUnsupportedMediaType, status)
	status, body, _ = raw("POST", "/v1/conversations/shared/cancel", bearer("alice-token-000000001", "Content-Type", "application/json", "Origin", "https://evil.example"))
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body.Error.Message, "cross-origin")

	// The token goes in the query for the event stream only.
	status, _, _ = raw("GET", "/v1/tool-calls?access_token=viewer-token-00000001", http.Header{})
	assert.Equal(t, http.StatusUnauthorized, status)

	// What no route takes answers in the error shape.
	status, body, _ = raw("GET", "/v1/nothing-here", http.Header{})
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "not_found", body.Error.Code)
	status, body, hdr := raw("DELETE", "/v1/tool-calls/"+mine.PendingID, bearer("alice-token-000000001"))
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	assert.Equal(t, "method_not_allowed", body.Error.Code)
	assert.Equal(t, "GET, HEAD", hdr.Get("Allow"))
	status, body, hdr = raw("POST", "/healthz", http.Header{"Content-Type": {"application/json"}})
	assert.Equal(t, http.StatusMethodNotAllowed, status, "outside /v1/ too")
	assert.Equal(t, "method_not_allowed", body.Error.Code)
	assert.Equal(t, "GET, HEAD", hdr.Get("Allow"))
	status, body, hdr = raw("PUT", "/style.css", http.Header{})
	assert.Equal(t, http.StatusMethodNotAllowed, status, "the inbox's files are read only")
	assert.Equal(t, "GET, HEAD", hdr.Get("Allow"))
	for _, path := range []string{"/nothing-here.js", "/v1/tool-calls/", "/v1"} {
		status, body, _ = raw("GET", path, http.Header{})
		assert.Equal(t, http.StatusNotFound, status, path)
		assert.Equal(t, "not_found", body.Error.Code, path)
	}

	// A sequence no stream has is refused, not a 500 (one past the
	// stream's end resumes: events_test.go).
	status, body, _ = raw("GET", "/v1/events?since=18446744073709551616", bearer("viewer-token-00000001"))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body.Error.Message, "since: 18446744073709551616 is past the largest sequence number")

	for _, e := range []machine.Entry{mine, theirs} {
		var got machine.Entry
		require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+e.PendingID, "viewer-token-00000001", nil, &got))
		assert.Equal(t, machine.StatePendingApproval, got.Status, "%s is untouched", e.PendingID)
	}

	// An agent cancelling the conversation stops its own calls only.
	var reply wire.CancelConversationReply
	require.Equal(t, http.StatusOK, h.do("POST", "/v1/conversations/shared/cancel", "agent-token-000000001", nil, &reply))
	require.Len(t, reply.Cancelled, 1)
	assert.Equal(t, mine.PendingID, reply.Cancelled[0].PendingID)
	var got machine.Entry
	require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+theirs.PendingID, "viewer-token-00000001", nil, &got))
	assert.Equal(t, machine.StatePendingApproval, got.Status, "the other agent's call is not the first agent's to cancel")
}

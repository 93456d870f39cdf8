package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// specPolicy asks about web searches and Bash, allows `npm test`, denies
// forbidden searches and gives the research team a budget, so that the
// scenario below meets every kind of entry.
const specPolicy = `
default:
  requiresApprovalTools: [web_search, Bash]
  approvers: [alice, root]
  approvalTimeoutMs: 3600000
  matchArgument: {web_search: query}
  describe: {web_search: "search the web for {{.query}}"}
  rules:
    deny: ["web_search(forbidden *)"]
    allow: ["Bash(npm test:*)"]
  notify:
    - {type: slack, url: "https://hooks.slack.com/services/T/B/X", signingSecret: ` + specSlackSecret + `, slackUsers: {U0ALICE: alice}}
teams:
  research:
    dailyCostLimit: 10
    rateLimits: [{match: "Bash(npm test:*)", max: 100, per: 1h}]
`

// specSlackSecret is the Slack app's signing secret specPolicy names.
const specSlackSecret = "spec-slack-signing-secret-0001"

const (
	specAgent  = "agent-token-000000001"
	specAlice  = "alice-token-000000001"
	specViewer = "viewer-token-00000001"
	specRoot   = "admin-token-000000001"
)

// specClient sends requests to a running toolgate and holds each request
// and its answer to the OpenAPI document the server serves: the route
// must be documented, the request (unless a test sends a bad one on
// purpose) valid, the status documented for the operation (not only by
// its default), and the body valid against the status's schema with no
// field the schema does not name.
type specClient struct {
	t      *testing.T
	url    string
	doc    *openapi3.T
	router routers.Router
	// answered records, per route ("GET /v1/tool-calls/{pendingId}"),
	// the statuses of the answers validated.
	answered map[string][]int
}

func newSpecClient(t *testing.T, url string) *specClient {
	t.Helper()
	resp, err := http.Get(url + "/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	doc := loadOpenAPI(t, data)
	// Routing by path alone: the document's server is relative ("/").
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return &specClient{t: t, url: url, doc: doc, router: router, answered: map[string][]int{}}
}

// specCall is one request.
type specCall struct {
	method, path, token string
	body                any    // marshalled to JSON unless []byte
	contentType         string // default application/json when there is a body
	header              http.Header
	// badRequest marks a request the document does not allow, sent to
	// see the refusal: it is not validated, its answer is.
	badRequest bool
}

// specOptions are the options requests and answers are validated with.
// A decision link's page is HTML, which kin-openapi does not read by
// itself: the decoder registered with them checks its body as the string
// it is.
var specOptions = func() *openapi3filter.Options {
	openapi3filter.RegisterBodyDecoder("text/html", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
	return &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
}()

func (c *specCall) build(t *testing.T, url string) *http.Request {
	t.Helper()
	var data []byte
	switch b := c.body.(type) {
	case nil:
	case []byte:
		data = b
	default:
		var err error
		data, err = json.Marshal(b)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(c.method, url+c.path, bytes.NewReader(data))
	require.NoError(t, err)
	if c.body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if c.body != nil || c.method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	return req
}

// do sends c, validates it and its answer, decodes the answer into out
// (when not nil) and returns the status.
func (s *specClient) do(c specCall, out any) int {
	s.t.Helper()
	status, _, body := s.send(c)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(body, out), "%s %s: %s", c.method, c.path, body)
	}
	return status
}

func (s *specClient) send(c specCall) (int, http.Header, []byte) {
	t := s.t
	t.Helper()
	where := c.method + " " + c.path
	route, params, err := s.router.FindRoute(c.build(t, s.url))
	require.NoError(t, err, "%s: no operation of the document takes it", where)
	in := &openapi3filter.RequestValidationInput{Request: c.build(t, s.url), PathParams: params, Route: route, Options: specOptions}
	if !c.badRequest {
		assert.NoError(t, openapi3filter.ValidateRequest(t.Context(), in), "%s: the request", where)
	}
	resp, err := http.DefaultClient.Do(c.build(t, s.url))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	s.check(where, route, in, resp, body)
	return resp.StatusCode, resp.Header, body
}

// check holds an answer to the operation's documented responses.
func (s *specClient) check(where string, route *routers.Route, in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) {
	t := s.t
	t.Helper()
	key := route.Method + " " + route.Path
	s.answered[key] = append(s.answered[key], resp.StatusCode)
	documented := route.Operation.Responses.Status(resp.StatusCode)
	if !assert.NotNil(t, documented, "%s: status %d is not documented (body %s)", where, resp.StatusCode, body) {
		return
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: body == nil}}
	if body != nil {
		out.SetBodyBytes(body)
	}
	assert.NoError(t, openapi3filter.ValidateResponse(t.Context(), out), "%s: the %d answer %s", where, resp.StatusCode, specClip(body))
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" && body != nil {
		mtype := documented.Value.Content.Get(mt)
		require.NotNil(t, mtype, "%s: %d answers JSON, documented as %v", where, resp.StatusCode, documented.Value.Content)
		var v any
		require.NoError(t, json.Unmarshal(body, &v))
		for _, extra := range undocumented("", v, mtype.Schema) {
			t.Errorf("%s: the %d answer has %s, which its schema does not name", where, resp.StatusCode, extra)
		}
	}
}

func specClip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// undocumented lists the fields of v that its schema does not name (the
// document leaves additionalProperties open, so that a client generated
// from it takes fields added later; the server's answers must still be
// all documented). An object schema with no properties is free-form.
func undocumented(where string, v any, s *openapi3.SchemaRef) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if len(s.Value.Properties) == 0 {
			return nil
		}
		for k, x := range v {
			p, ok := s.Value.Properties[k]
			if !ok {
				out = append(out, where+"."+k)
				continue
			}
			out = append(out, undocumented(where+"."+k, x, p)...)
		}
	case []any:
		for i, x := range v {
			out = append(out, undocumented(fmt.Sprintf("%s[%d]", where, i), x, s.Value.Items)...)
		}
	}
	return out
}

// validEvent holds one server-sent event's data to the Event schema.
func (s *specClient) validEvent(data []byte) {
	s.t.Helper()
	schema := s.doc.Components.Schemas["Event"]
	var v any
	require.NoError(s.t, json.Unmarshal(data, &v))
	assert.NoError(s.t, schema.Value.VisitJSON(v, openapi3.MultiErrors()), "event %s", data)
	for _, extra := range undocumented("", v, schema) {
		s.t.Errorf("event %s has %s, which the Event schema does not name", data, extra)
	}
}

// validError holds an answer no operation documents (an unknown route, a
// method a path does not take) to the API's error shape.
func (s *specClient) validError(method, path string, wantStatus int, wantCode string) http.Header {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, nil)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+specRoot)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	where := method + " " + path
	assert.Equal(s.t, wantStatus, resp.StatusCode, "%s: %s", where, body)
	if method == http.MethodHead {
		return resp.Header
	}
	assert.Equal(s.t, "application/json", resp.Header.Get("Content-Type"), where)
	var v any
	if assert.NoError(s.t, json.Unmarshal(body, &v), "%s answers JSON: %s", where, body) {
		schema := s.doc.Components.Schemas["ErrorBody"]
		assert.NoError(s.t, schema.Value.VisitJSON(v), "%s: %s", where, body)
		assert.Empty(s.t, undocumented("", v, schema), where)
		var eb httpapi.ErrorBody
		require.NoError(s.t, json.Unmarshal(body, &eb))
		assert.Equal(s.t, wantCode, eb.Error.Code, where)
	}
	return resp.Header
}

// specFill puts a value in each {name} of a route's path.
func specFill(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") {
			parts[i] = "x"
		}
	}
	return strings.Join(parts, "/")
}

// TestOpenAPI_EveryRouteAnswersAsDocumented sends real requests to every
// route the server registers and holds each request and answer to the
// document. The routes come from the server's own table, so a route added
// without a spec entry fails here, and so does one that no request below
// sees answer with success.
func TestOpenAPI_EveryRouteAnswersAsDocumented(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "http", "analytics", "timer"}, Policy: specPolicy, Tokens: tokens})
	s := newSpecClient(t, g.HTTPURL)
	// step runs a phase of the test as a subtest, so that a failure names
	// it; the spec client checks on the subtest's behalf meanwhile. A
	// phase relies on those before it: the first that fails ends the test.
	step := func(name string, phase func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, func(t *testing.T) { s.t = t; phase(t) }) {
			t.FailNow()
		}
	}

	step("strangers, methods a route does not take, paths no route takes", func(t *testing.T) {
		// Every route, as a stranger and with a method it does not take; paths
		// no route takes.
		methods := map[string][]string{}
		for _, r := range httpapi.Routes() {
			methods[r[1]] = append(methods[r[1]], r[0])
		}
		for path, ms := range methods {
			for _, m := range ms {
				c := specCall{method: m, path: specFill(path), badRequest: true}
				if m == http.MethodPost {
					c.body = map[string]any{}
				}
				s.send(c)
			}
			var allow []string
			for _, m := range ms {
				allow = append(allow, m)
				if m == http.MethodGet {
					allow = append(allow, http.MethodHead)
				}
			}
			other := http.MethodPatch
			for _, m := range []string{http.MethodDelete, http.MethodPut, http.MethodPatch} {
				if !slices.Contains(ms, m) {
					other = m
					break
				}
			}
			hdr := s.validError(other, specFill(path), http.StatusMethodNotAllowed, "method_not_allowed")
			assert.ElementsMatch(t, allow, strings.Split(hdr.Get("Allow"), ", "), "Allow of %s", path)
		}

		for _, path := range []string{"/v1/nothing-here", "/v1/tool-calls/a/b/c", "/nothing-here.js"} {
			s.validError(http.MethodGet, path, http.StatusNotFound, "not_found")
		}
	})

	webSearch := func(id, query string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "web_search", Arguments: json.RawMessage(`{"query":"` + query + `"}`),
			ConversationID: "spec", Team: "research", EstimatedCost: 0.5, TaskID: "t1", PermissionMode: "default"}
	}
	submit := func(c machine.Call) machine.Entry {
		s.t.Helper()
		var e machine.Entry
		require.Equal(s.t, http.StatusCreated, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent, body: c}, &e))
		return e
	}
	// What a phase leaves to those after it.
	var (
		first, second, previewed machine.Entry
		page                     wire.ListPage
	)

	step("submitting", func(t *testing.T) {
		first = submit(webSearch("c1", "q1"))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent, body: webSearch("c1", "q1")}, nil), "a retry")
		assert.Equal(t, http.StatusConflict, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent, body: webSearch("c1", "other")}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent,
			body: machine.Call{ToolName: "web search", ConversationID: "spec"}}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specViewer, body: webSearch("c0", "q")}, nil))
		assert.Equal(t, http.StatusUnsupportedMediaType, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent,
			body: []byte(`{}`), contentType: "text/plain", badRequest: true}, nil))
		assert.Equal(t, http.StatusRequestEntityTooLarge, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent,
			body: webSearch("big", strings.Repeat("x", 2<<20))}, nil))
		denied := submit(webSearch("c2", "forbidden fruit"))
		assert.Equal(t, machine.StateRejectedByPolicy, denied.Status)
	})

	step("reading", func(t *testing.T) {
		second = submit(webSearch("c3", "q3"))
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls?conversationId=spec&limit=1", token: specViewer}, &page))
		require.NotEmpty(t, page.NextCursor)
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls?status=PENDING_APPROVAL&toolName=web_search&callerBotId=bot-1&cursor=" + page.NextCursor, token: specViewer}, &page))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/tool-calls?status=DONE", token: specViewer, badRequest: true}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/tool-calls?limit=5000", token: specViewer}, nil))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + first.PendingID, token: specViewer}, nil))
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "GET", path: "/v1/tool-calls/spec.nope", token: specViewer}, nil))
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "GET", path: "/v1/tool-calls/spec.nope/history", token: specViewer}, nil))
	})

	step("deciding: a session grant, a conflict, an edit, a refused edit", func(t *testing.T) {
		decide := func(id, token string, d wire.DecideRequest) int {
			return s.do(specCall{method: "POST", path: "/v1/tool-calls/" + id + "/decision", token: token, body: d}, nil)
		}
		require.Equal(t, http.StatusOK, decide(first.PendingID, specAlice, wire.DecideRequest{Approved: true, Reason: "fine", Scope: machine.ScopeSession, ForMs: 3_600_000}))
		assert.Equal(t, http.StatusConflict, decide(first.PendingID, specAlice, wire.DecideRequest{Approved: false}))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + second.PendingID + "/decision", token: specAlice,
			body: map[string]any{"reason": "no verdict"}, badRequest: true}, nil), "approved is required")
		assert.Equal(t, http.StatusForbidden, decide(second.PendingID, specAlice, wire.DecideRequest{Approved: true, Arguments: json.RawMessage(`{"query":"forbidden x"}`)}))
		assert.Equal(t, http.StatusForbidden, decide(second.PendingID, specAgent, wire.DecideRequest{Approved: true}))
		assert.Equal(t, http.StatusNotFound, decide("spec.nope", specAlice, wire.DecideRequest{Approved: true}))
		require.Equal(t, http.StatusOK, decide(second.PendingID, specAlice, wire.DecideRequest{Approved: true, Arguments: json.RawMessage(`{"query":"q3 edited"}`)}))
		var hist []wire.HistoryItem
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + second.PendingID + "/history", token: specViewer}, &hist))
		require.NotEmpty(t, hist)
		assert.NotNil(t, hist[len(hist)-1].Edit, "the history shows the edit")
	})

	step("running: a lease, then an outcome", func(t *testing.T) {
		_, err := g.Client.Started(t.Context(), second.PendingID, "worker-1")
		require.NoError(t, err)
		var running machine.Entry
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + second.PendingID, token: specViewer}, &running))
		require.NotNil(t, running.Lease, "a running call's lease is shown")
		_, err = g.Client.Fail(t.Context(), second.PendingID, "worker-1", "the search engine is down", 0.25)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + second.PendingID, token: specViewer}, nil))
	})

	step("an agent running its own calls: claimed, renewed, reported", func(t *testing.T) {
		report := func(id, what, token string, body any) int {
			return s.do(specCall{method: "POST", path: "/v1/tool-calls/" + id + "/" + what, token: token, body: body}, nil)
		}
		approved := func(id string) machine.Entry {
			c := webSearch(id, "run "+id)
			c.ConversationID = "spec-run"
			e := submit(c)
			require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + e.PendingID + "/decision", token: specAlice,
				body: wire.DecideRequest{Approved: true}}, nil))
			return e
		}
		ran, broke := approved("r1"), approved("r2")
		assert.Equal(t, http.StatusForbidden, report(ran.PendingID, "started", specViewer, nil), "a viewer runs nothing")
		var e machine.Entry
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + ran.PendingID + "/started", token: specAgent,
			body: wire.ReportRequest{LeaseMs: 60_000}}, &e))
		assert.Equal(t, machine.StateExecuting, e.Status)
		assert.Equal(t, http.StatusConflict, report(ran.PendingID, "started", specAgent, nil), "claimed once")
		assert.Equal(t, http.StatusOK, report(ran.PendingID, "heartbeat", specAgent, nil))
		assert.Equal(t, http.StatusBadRequest, report(ran.PendingID, "heartbeat", specAgent, wire.ReportRequest{Result: json.RawMessage(`{}`)}), "a heartbeat takes no result")
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + ran.PendingID + "/succeeded", token: specAgent,
			body: wire.ReportRequest{Cost: -1}, badRequest: true}, nil), "a negative cost, as the document's minimum says")
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + ran.PendingID + "/succeeded", token: specAgent,
			body: wire.ReportRequest{Result: json.RawMessage(`{"hits":3}`), Cost: 0.1}}, &e))
		assert.Equal(t, machine.StateCompletedSuccess, e.Status)
		assert.JSONEq(t, `{"hits":3}`, string(e.Result))
		require.Equal(t, http.StatusOK, report(broke.PendingID, "started", specAgent, nil))
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + broke.PendingID + "/failed", token: specAgent,
			body: wire.ReportRequest{Error: "the search engine is down", Result: json.RawMessage(`{"hits":1}`)}}, &e))
		assert.Equal(t, machine.StateCompletedFailure, e.Status)
		assert.Equal(t, "the search engine is down", e.Error)
		assert.JSONEq(t, `{"hits":1}`, string(e.Result), "what the tool made before it failed, as over NATS")
		assert.Equal(t, http.StatusNotFound, report("spec.nope", "failed", specAgent, nil))

		// A run whose executor is lost ends with its outcome unknown
		// (web_search is not declared idempotent); an approver runs it
		// once more, as a new call.
		lost := approved("r3")
		require.Equal(t, http.StatusOK, report(lost.PendingID, "started", specAgent, wire.ReportRequest{LeaseMs: 1}))
		bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the lost run ended unknown", func() (bool, any) {
			s.do(specCall{method: "GET", path: "/v1/tool-calls/" + lost.PendingID, token: specViewer}, &e)
			return e.OutcomeUnknown, e.Status
		})
		rerun := func(token string, out any) int {
			return s.do(specCall{method: "POST", path: "/v1/tool-calls/" + lost.PendingID + "/rerun", token: token, body: wire.RerunRequest{Reason: "checked"}}, out)
		}
		assert.Equal(t, http.StatusForbidden, rerun(specAgent, nil), "an agent runs nothing again")
		require.Equal(t, http.StatusOK, rerun(specAlice, &e))
		assert.Equal(t, lost.PendingID, e.RerunOf)
		assert.Equal(t, machine.StateScheduled, e.Status)
		assert.Equal(t, http.StatusConflict, rerun(specRoot, nil), "run again once")
		assert.Equal(t, http.StatusConflict, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + ran.PendingID + "/rerun", token: specAlice}, nil), "its outcome is known")
	})

	step("its receipts, verified with the published keys", func(t *testing.T) {
		// Its receipts, verified with the published keys (open to anyone).
		var chain wire.ReceiptChain
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + second.PendingID + "/receipts", token: specViewer}, &chain))
		var keys wire.ReceiptKeys
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/receipts/key"}, &keys))
		_, err := client.VerifyReceiptChain(&chain, keys.Keys)
		require.NoError(t, err)
		assert.Len(t, chain.Receipts, 4, "ask, approve (edited), start, fail")
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "GET", path: "/v1/tool-calls/spec.nope/receipts", token: specViewer}, nil))
	})

	step("its arguments revealed to an admin, refused to a viewer, and the reveal in its history", func(t *testing.T) {
		var r wire.RevealReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + second.PendingID + "/reveal", token: specRoot}, &r))
		assert.Equal(t, "root", r.Reveal.By)
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + second.PendingID + "/reveal", token: specViewer}, nil))
		var history []wire.HistoryItem
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + second.PendingID + "/history", token: specViewer}, &history))
		assert.Equal(t, wire.HistoryRevealed, history[len(history)-1].Event)
	})

	step("deciding by pattern", func(t *testing.T) {
		for _, id := range []string{"b1", "b2"} {
			c := webSearch(id, "batch "+id)
			c.ConversationID = "spec-batch"
			submit(c)
		}
		var batch wire.DecideMatchingReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/decisions", token: specAlice,
			body: wire.DecideMatchingRequest{Match: "web_search", ConversationID: "spec-batch", DryRun: true}}, &batch))
		assert.Len(t, batch.Decided, 2)
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/decisions", token: specAlice,
			body: wire.DecideMatchingRequest{Match: "web_search", ConversationID: "spec-batch", Approved: false, Reason: "not now"}}, &batch))
		assert.Len(t, batch.Decided, 2)
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/decisions", token: specAlice,
			body: map[string]any{"approved": true}, badRequest: true}, nil))
	})

	step("grants", func(t *testing.T) {
		var grants []wire.Grant
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/grants?conversationId=spec", token: specViewer}, &grants))
		require.NotEmpty(t, grants, "the session approval's grant")
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/grants/" + grants[0].ID + "/revoke", token: specAlice}, nil))
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "POST", path: "/v1/grants/nope/revoke", token: specAlice}, nil))
	})

	step("what a grant would cover, before granting", func(t *testing.T) {
		previewed = submit(webSearch("c7", "q7"))
		var preview wire.GrantPreview
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls/" + previewed.PendingID + "/grant-preview?scope=session", token: specViewer}, &preview))
		assert.Equal(t, "web_search", preview.ToolName)
	})

	step("a one-time decision link", func(t *testing.T) {
		// A one-time decision link, as a notification carries it: its page,
		// then its redemption.
		tokens, err := g.Service.Links().Issue(t.Context(), gate.System, previewed.PendingID, "alice")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/decision-tokens/" + tokens.Approve}, nil))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/decision-tokens/" + tokens.Approve, body: []byte("{}")}, nil))
	})

	step("a click on a Slack card", func(t *testing.T) {
		// A click on a Slack card, signed with the app's secret, by a user
		// the policy does not map: answered (the user is told, privately).
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		payload, err := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]string{"id": "U0NOBODY"},
			"actions":      []map[string]string{{"action_id": gate.SlackActionApprove, "value": previewed.PendingID, "type": "button"}},
			"response_url": "https://hooks.slack.com/actions/T/1/spec"})
		require.NoError(t, err)
		click := url.Values{"payload": {string(payload)}}.Encode()
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/integrations/slack/interactions", body: []byte(click),
			contentType: "application/x-www-form-urlencoded",
			header:      http.Header{"X-Slack-Request-Timestamp": {ts}, "X-Slack-Signature": {gate.SignSlack(specSlackSecret, ts, []byte(click))}}}, nil))
	})

	step("the reference design's decision", func(t *testing.T) {
		third := submit(webSearch("c4", "q4"))
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "POST", path: "/v1/respond", token: specAlice,
			body: wire.RespondRequest{ConversationID: "elsewhere", PendingID: third.PendingID, Approved: true}}, nil))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/respond", token: specAlice,
			body: wire.RespondRequest{ConversationID: "spec", PendingID: third.PendingID, Approved: false, Reason: "no"}}, nil))
	})

	step("cancelling", func(t *testing.T) {
		fourth := submit(webSearch("c5", "q5"))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + fourth.PendingID + "/cancel", token: specAgent,
			body: wire.CancelRequest{Reason: "changed my mind"}}, nil))
		assert.Equal(t, http.StatusConflict, s.do(specCall{method: "POST", path: "/v1/tool-calls/" + fourth.PendingID + "/cancel", token: specAgent}, nil))
		c := webSearch("c6", "q6")
		c.ConversationID = "spec-cancel"
		submit(c)
		var cancelled wire.CancelConversationReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/conversations/spec-cancel/cancel", token: specAgent}, &cancelled))
		assert.Len(t, cancelled.Cancelled, 1)
	})

	step("the AuthZEN decision point", func(t *testing.T) {
		evaluation := func(id, query string) wire.AccessEvaluationRequest {
			return wire.AccessEvaluationRequest{
				Subject:  &wire.AuthZENSubject{Type: "agent", ID: "bot-1"},
				Action:   &wire.AuthZENAction{Name: "web_search"},
				Resource: &wire.AuthZENResource{Type: wire.AuthZENToolCall, ID: id, Properties: json.RawMessage(`{"arguments":{"query":"` + query + `"},"conversationId":"spec-authzen"}`)},
			}
		}
		var d wire.AccessDecision
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/access/v1/evaluation", token: specAgent, body: evaluation("z1", "q"),
			header: http.Header{"X-Request-Id": {"spec-1"}}}, &d))
		assert.False(t, d.Decision)
		assert.Equal(t, wire.AccessApprovalRequired, d.Context.Reason)
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/access/v1/evaluation", token: specAgent, body: evaluation("z2", "forbidden fruit")}, &d))
		assert.Equal(t, wire.AccessPolicyDenied, d.Context.Reason)
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/access/v1/evaluation", token: specAgent,
			body: wire.AccessEvaluationRequest{Action: &wire.AuthZENAction{Name: "web_search"}}, badRequest: true}, nil))
		other := evaluation("z3", "q")
		other.Subject.ID = "bot-2"
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/access/v1/evaluation", token: specAgent, body: other}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/access/v1/evaluation", token: specViewer, body: evaluation("z3", "q")}, nil))
		var batch wire.AccessEvaluationsReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/access/v1/evaluations", token: specAgent, body: wire.AccessEvaluationsRequest{
			AccessEvaluationRequest: evaluation("z4", "q4"),
			Evaluations:             []wire.AccessEvaluationRequest{{}, {Resource: evaluation("z5", "forbidden x").Resource}},
			Options:                 &wire.AccessEvaluationsOptions{EvaluationsSemantic: wire.DenyOnFirstDeny},
		}}, &batch))
		assert.Len(t, batch.Evaluations, 1, "the first is asked: false, and the batch stops")
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/access/v1/evaluations", token: specAgent, body: wire.AccessEvaluationsRequest{
			Evaluations: []wire.AccessEvaluationRequest{evaluation("z6", "q"), {}}}}, nil))
		var meta wire.AuthZENConfiguration
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/.well-known/authzen-configuration"}, &meta))
		assert.Equal(t, g.HTTPURL+"/access/v1/evaluation", meta.AccessEvaluationEndpoint)
	})

	step("Claude Code's hooks", func(t *testing.T) {
		// Claude Code's hooks: allowed by a rule, run, reported.
		hookIn := `{"session_id":"spec-hook","transcript_path":"/t.jsonl","cwd":"/p","permission_mode":"default","hook_event_name":"PermissionRequest",` +
			`"tool_name":"Bash","tool_input":{"command":"npm test"},"permission_suggestions":[]}`
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/integrations/claude-code/permission-request?team=research&timeout=30&wait=5", token: specAgent, body: []byte(hookIn)}, nil))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/integrations/claude-code/post-tool-use", token: specAgent,
			body: []byte(`{"session_id":"spec-hook","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"npm test"},"tool_use_id":"toolu_01","tool_response":{"stdout":"ok"}}`)}, nil))
		// A request the hooks refuse is a deny, in a 200: Claude Code runs the call on any other status.
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/integrations/claude-code/pre-tool-use?timeout=soon", token: specAgent, body: []byte(hookIn)}, nil))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/integrations/claude-code/session-start", token: specAgent, body: []byte(hookIn), badRequest: true}, nil))
		var done itemsPage
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls?conversationId=spec-hook", token: specViewer}, &done))
		require.Len(t, done.Items, 1)
		assert.Equal(t, machine.StateCompletedSuccess, done.Items[0].Status)
	})

	step("budgets, who I am, analytics", func(t *testing.T) {
		var budgets wire.BudgetsReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/budgets", token: specViewer}, &budgets))
		require.NotEmpty(t, budgets.Items)
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/budgets?team=research", token: specViewer}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "GET", path: "/v1/budgets", token: specAgent}, nil))
		var rates wire.RateLimitsReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/rate-limits", token: specViewer}, &rates))
		require.Len(t, rates.Items, 1)
		assert.Equal(t, `rateLimits[0] "Bash(npm test:*)" (teams.research)`, rates.Items[0].Rule)
		if assert.Len(t, rates.Items[0].Counters, 1, "the hook's npm test took a slot") {
			assert.Equal(t, wire.RateCount{Value: "research", Count: 1, FreesAt: rates.Items[0].Counters[0].FreesAt}, rates.Items[0].Counters[0])
		}
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "GET", path: "/v1/rate-limits", token: specAgent}, nil))
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/me", token: specAgent}, nil))
		var report wire.AnalyticsReport
		bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the analytics count every call", func() (bool, any) {
			require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/analytics?hours=2&resolution=hour", token: specViewer}, &report))
			return report.Lag == 0 && report.Totals.Calls >= 9 && len(report.Approvers) > 0, report.Totals
		})
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: fmt.Sprintf("/v1/analytics?hours=1&resolution=minute&until=%d", report.GeneratedAt), token: specViewer}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/analytics?hours=100000", token: specViewer}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/analytics?hours=soon", token: specViewer, badRequest: true}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/analytics?hours=48&resolution=minute", token: specViewer}, nil), "a day at most by the minute")
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/analytics?resolution=day", token: specViewer, badRequest: true}, nil))
	})

	step("trying a policy before it is put in force", func(t *testing.T) {
		// Trying a policy before it is put in force: the calls so far,
		// replayed through a candidate that no longer asks about web searches.
		var dry wire.PolicyDryRunReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/dry-run", token: specViewer,
			body: wire.PolicyDryRunRequest{Document: "default: {requiresApprovalTools: [Bash]}", Team: new("research"), Examples: 1}}, &dry))
		assert.NotZero(t, dry.Changed)
		assert.NotEmpty(t, dry.Examples)
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/dry-run", token: specAlice,
			body: wire.PolicyDryRunRequest{Document: "{}", Since: 1}}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/policy/dry-run", token: specViewer,
			body: wire.PolicyDryRunRequest{Document: "default: {approvalTimeoutMs: -1}"}}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/policy/dry-run", token: specAgent,
			body: wire.PolicyDryRunRequest{Document: "{}"}}, nil))
		var explained wire.PolicyExplainReply
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/explain", token: specViewer,
			body: wire.PolicyExplainRequest{ToolName: "web_search", Arguments: json.RawMessage(`{"query":"forbidden x"}`), Team: "research"}}, &explained))
		assert.Equal(t, wire.VerdictDeny, explained.Verdict)
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/policy/explain", token: specViewer,
			body: wire.PolicyExplainRequest{ToolName: "web_search", Arguments: json.RawMessage(`[]`)}, badRequest: true}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/policy/explain", token: specAgent,
			body: wire.PolicyExplainRequest{ToolName: "web_search"}}, nil))
	})

	step("the shadow policy", func(t *testing.T) {
		// A shadow policy the same as the one in force, so that promoting
		// it changes nothing the steps after rely on.
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "GET", path: "/v1/policy/shadow", token: specViewer}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/policy/shadow", token: specAlice,
			body: wire.PolicyDocument{Document: specPolicy}}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "POST", path: "/v1/policy/shadow", token: specRoot,
			body: wire.PolicyDocument{Document: "default: {approvalTimeoutMs: -1}"}}, nil))
		var set, got wire.PolicyDocument
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/shadow", token: specRoot,
			body: wire.PolicyDocument{Document: specPolicy}}, &set))
		require.NotZero(t, set.Revision)
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/policy/shadow", token: specViewer}, &got))
		assert.Equal(t, set, got)
		require.Equal(t, http.StatusCreated, s.do(specCall{method: "POST", path: "/v1/tool-calls", token: specAgent, body: webSearch("shadow1", "q")}, nil))
		var report wire.PolicyShadowReport
		bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the shadow's report counts the call", func() (bool, any) {
			require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/policy/shadow/report?examples=1", token: specViewer}, &report))
			return report.Calls >= 1, report
		})
		assert.Equal(t, set.Revision, report.ShadowRevision)
		assert.Zero(t, report.Changed, "the same policy")
		assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: fmt.Sprintf("/v1/policy/shadow/report?since=1&revision=%d", set.Revision), token: specAlice}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/policy/shadow/report?examples=soon", token: specViewer, badRequest: true}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "GET", path: "/v1/policy/shadow/report", token: specAgent}, nil))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/policy/shadow/promote", token: specAlice,
			body: wire.PolicyShadowPromoteRequest{Revision: set.Revision}}, nil))
		assert.Equal(t, http.StatusConflict, s.do(specCall{method: "POST", path: "/v1/policy/shadow/promote", token: specRoot,
			body: wire.PolicyShadowPromoteRequest{Revision: set.Revision + 1000}}, nil))
		var inForce wire.PolicyDocument
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/shadow/promote", token: specRoot,
			body: wire.PolicyShadowPromoteRequest{Revision: set.Revision}}, &inForce))
		assert.Greater(t, inForce.Revision, set.Revision)
		assert.Equal(t, http.StatusNotFound, s.do(specCall{method: "POST", path: "/v1/policy/shadow/promote", token: specRoot,
			body: wire.PolicyShadowPromoteRequest{Revision: set.Revision}}, nil))
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/shadow", token: specRoot,
			body: wire.PolicyDocument{Document: specPolicy}}, &set))
		assert.Equal(t, http.StatusForbidden, s.do(specCall{method: "POST", path: "/v1/policy/shadow/clear", token: specAlice, body: struct{}{}}, nil))
		var cleared wire.PolicyShadowCleared
		require.Equal(t, http.StatusOK, s.do(specCall{method: "POST", path: "/v1/policy/shadow/clear", token: specRoot, body: struct{}{}}, &cleared))
		assert.Equal(t, set.Revision, cleared.Revision)
	})

	step("what anyone may ask", func(t *testing.T) {
		for _, path := range []string{"/v1/openapi.json", "/v1/schemas/event.json", "/healthz", "/readyz", "/metrics"} {
			assert.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: path}, nil), path)
		}
	})

	step("the event stream", func(t *testing.T) {
		// The event stream: every event so far, each one's data an Event.
		require.Equal(t, http.StatusOK, s.do(specCall{method: "GET", path: "/v1/tool-calls?limit=1", token: specViewer}, &page))
		s.events(specCall{method: "GET", path: "/v1/events?since=0", token: specViewer}, page.EventsSeq)
		s.events(specCall{method: "GET", path: "/v1/events?conversationId=spec&toolName=web_search", token: specViewer,
			header: http.Header{"Last-Event-ID": {"0"}}}, 0)
		s.events(specCall{method: "GET", path: "/v1/events?since=0&access_token=" + specAgent}, 0)
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/events?since=18446744073709551616", token: specViewer, badRequest: true}, nil))
		assert.Equal(t, http.StatusBadRequest, s.do(specCall{method: "GET", path: "/v1/events?since=soon", token: specViewer, badRequest: true}, nil))
	})

	for _, r := range httpapi.Routes() {
		key := r[0] + " " + r[1]
		ok := slices.ContainsFunc(s.answered[key], func(status int) bool { return status < 300 })
		assert.True(t, ok, "%s: no request here was answered with success (answers: %v); add one to this test", key, s.answered[key])
	}
}

// itemsPage is a page read for its items alone.
type itemsPage struct {
	Items []machine.Entry `json:"items"`
}

// events opens an event stream, validates the answer's status and headers,
// and reads events until the one with id last (or, when last is 0, the
// first), holding each one's data to the Event schema.
func (s *specClient) events(c specCall, last uint64) {
	t := s.t
	t.Helper()
	route, params, err := s.router.FindRoute(c.build(t, s.url))
	require.NoError(t, err)
	in := &openapi3filter.RequestValidationInput{Request: c.build(t, s.url), PathParams: params, Route: route, Options: specOptions}
	require.NoError(t, openapi3filter.ValidateRequest(t.Context(), in), "%s %s: the request", c.method, c.path)
	req := c.build(t, s.url)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req = req.WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	s.check(c.method+" "+c.path, route, in, resp, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	require.Equal(t, "text/event-stream", mt)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var id uint64
	var seen []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, err = strconv.ParseUint(line[4:], 10, 64)
			require.NoError(t, err)
		case strings.HasPrefix(line, "event: "):
			seen = append(seen, line[7:])
		case strings.HasPrefix(line, "data: "):
			s.validEvent([]byte(line[6:]))
		case line == "" && id != 0 && (last == 0 || id >= last):
			return
		}
	}
	t.Fatalf("%s %s: the stream ended before event %d (%v); saw %v", c.method, c.path, last, sc.Err(), seen)
}

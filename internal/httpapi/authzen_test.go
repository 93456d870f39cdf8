package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// authzenPolicy lets reads run, asks about deploys and denies deploying
// to prod.
const authzenPolicy = `
default:
  requiresApprovalTools: [deploy]
  approvers: [alice]
  readOnlyTools: [read_file]
  matchArgument: {deploy: env}
  rules: {deny: ["deploy(prod)"]}
`

// authzenTokens add the agent the specification's examples name.
const authzenTokens = tokens + "spec-example-token-0001 alice@example.com agent\n"

func startAuthZEN(t *testing.T) *harness {
	t.Helper()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "http"}, Policy: authzenPolicy, Tokens: authzenTokens})
	return &harness{t: t, url: g.HTTPURL}
}

// specSchema compiles one of the specification's JSON Schemas, copied
// into testdata/authzen (README.md there says from where).
func specSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "authzen", name))
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(name, doc))
	s, err := c.Compile(name)
	require.NoError(t, err)
	return s
}

// specExample is one example of the specification (testdata/authzen/
// examples.json).
type specExample struct {
	Line      int             `json:"line"`
	Section   string          `json:"section"`
	Endpoint  string          `json:"endpoint"`
	RequestID string          `json:"requestId"`
	Invalid   string          `json:"invalid"`
	Answer    int             `json:"answer"` // the line of the example's response
	Body      json.RawMessage `json:"body"`
}

// postJSON sends body to url as the holder of token, with an X-Request-ID
// when id is set, and returns the answer.
func postJSON(t *testing.T, url, token, id string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if id != "" {
		req.Header.Set("X-Request-ID", id)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// TestAuthZEN_TheSpecificationsExamples: every request example of the
// specification is a request toolgate takes (the one that leaves out the
// action refused with 400, as the specification says), answered in the
// shape of its response schema, X-Request-ID and all, and fail closed
// (none of them asks about a tool call); each batch stops where its
// semantics say; every response example is a decision toolgate's wire
// types read; the metadata document has the members the specification
// requires, naming this server.
func TestAuthZEN_TheSpecificationsExamples(t *testing.T) {
	t.Parallel()
	h := startAuthZEN(t)
	data, err := os.ReadFile(filepath.Join("testdata", "authzen", "examples.json"))
	require.NoError(t, err)
	var examples struct {
		Requests  []specExample `json:"requests"`
		Responses []specExample `json:"responses"`
		Metadata  specExample   `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(data, &examples))
	require.NotEmpty(t, examples.Requests)
	reqSchema, respSchema := specSchema(t, "evaluation-request.schema.json"), specSchema(t, "evaluation-response.schema.json")
	valid := func(s *jsonschema.Schema, data []byte, where string) {
		t.Helper()
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		require.NoError(t, err, where)
		assert.NoError(t, s.Validate(v), "%s: %s", where, data)
	}

	for _, ex := range examples.Requests {
		where := ex.Section + " (line " + strconv.Itoa(ex.Line) + ")"
		if ex.Endpoint == wire.AuthZENEvaluationPath {
			valid(reqSchema, ex.Body, where+": the example, by the specification's schema")
		}
		resp, body := postJSON(t, h.url+ex.Endpoint, "spec-example-token-0001", ex.RequestID, ex.Body)
		if ex.RequestID != "" {
			assert.Equal(t, ex.RequestID, resp.Header.Get("X-Request-ID"), where)
		}
		if ex.Invalid != "" {
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s (%s): %s", where, ex.Invalid, body)
			continue
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", where, body)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), where)
		var reply struct {
			Evaluations []json.RawMessage `json:"evaluations"`
		}
		require.NoError(t, json.Unmarshal(body, &reply), where)
		decisions := reply.Evaluations
		if ex.Endpoint == wire.AuthZENEvaluationPath {
			decisions = []json.RawMessage{body}
		}
		for _, d := range decisions {
			valid(respSchema, d, where+": the answer")
			var got wire.AccessDecision
			require.NoError(t, json.Unmarshal(d, &got))
			assert.False(t, got.Decision, "%s: not a tool call: fail closed", where)
			assert.Equal(t, wire.AccessUndecided, got.Context.Reason, where)
		}
		var sent wire.AccessEvaluationsRequest
		require.NoError(t, json.Unmarshal(ex.Body, &sent))
		switch {
		case ex.Endpoint == wire.AuthZENEvaluationPath:
		case sent.Options != nil && sent.Options.EvaluationsSemantic == wire.DenyOnFirstDeny:
			assert.Len(t, decisions, 1, "%s: stops at the first deny", where)
		default:
			assert.Len(t, decisions, len(sent.Evaluations), "%s: every evaluation answered, in order", where)
		}
	}

	for _, ex := range examples.Responses {
		where := ex.Section + " (line " + strconv.Itoa(ex.Line) + ")"
		var reply wire.AccessEvaluationsReply
		require.NoError(t, json.Unmarshal(ex.Body, &reply), where)
		var raw struct {
			Decision    *bool             `json:"decision"`
			Evaluations []json.RawMessage `json:"evaluations"`
		}
		require.NoError(t, json.Unmarshal(ex.Body, &raw), where)
		if ex.Endpoint == wire.AuthZENEvaluationPath {
			valid(respSchema, ex.Body, where)
			require.NotNil(t, reply.Decision, where)
			assert.Equal(t, *raw.Decision, *reply.Decision, where)
			continue
		}
		require.Len(t, reply.Evaluations, len(raw.Evaluations), where)
		for i, d := range raw.Evaluations {
			valid(respSchema, d, where)
			var one struct {
				Decision bool `json:"decision"`
			}
			require.NoError(t, json.Unmarshal(d, &one))
			assert.Equal(t, one.Decision, reply.Evaluations[i].Decision, "%s[%d]", where, i)
		}
	}

	var meta map[string]any
	require.Equal(t, http.StatusOK, h.do("GET", wire.AuthZENConfigurationPath, "", nil, &meta))
	var example map[string]any
	require.NoError(t, json.Unmarshal(examples.Metadata.Body, &example))
	for _, required := range []string{"policy_decision_point", "access_evaluation_endpoint"} {
		assert.Contains(t, example, required, "the example has what the specification requires")
	}
	assert.Equal(t, h.url, meta["policy_decision_point"], "the identifier the well-known path was put after")
	assert.Equal(t, h.url+wire.AuthZENEvaluationPath, meta["access_evaluation_endpoint"])
	assert.Equal(t, h.url+wire.AuthZENEvaluationsPath, meta["access_evaluations_endpoint"])
}

// specPEP is a policy enforcement point written from the AuthZEN
// specification alone: it reads the decision point's metadata at the
// well-known path, then asks its access evaluation endpoint, with
// net/http and JSON and no type of toolgate's.
type specPEP struct {
	t          *testing.T
	token      string
	evaluation string
}

func discoverPEP(t *testing.T, base, token string) *specPEP {
	t.Helper()
	resp, err := http.Get(base + "/.well-known/authzen-configuration")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var meta map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&meta))
	// The metadata is used only when it names the decision point asked.
	require.Equal(t, base, meta["policy_decision_point"])
	endpoint, ok := meta["access_evaluation_endpoint"].(string)
	require.True(t, ok, "access_evaluation_endpoint is required: %v", meta)
	return &specPEP{t: t, token: token, evaluation: endpoint}
}

// evaluate asks whether subject may do action on resource, and returns
// the HTTP status and the decision.
func (p *specPEP) evaluate(subject, action, resource map[string]any) (int, map[string]any) {
	p.t.Helper()
	body, err := json.Marshal(map[string]any{"subject": subject, "action": action, "resource": resource, "context": map[string]any{"time": "2026-05-12T15:00:00Z"}})
	require.NoError(p.t, err)
	resp, data := postJSON(p.t, p.evaluation, p.token, "", body)
	var decision map[string]any
	if resp.StatusCode == http.StatusOK {
		require.NoError(p.t, json.Unmarshal(data, &decision), "%s", data)
		_, ok := decision["decision"].(bool)
		require.True(p.t, ok, "a decision is a boolean: %s", data)
	}
	return resp.StatusCode, decision
}

// TestAuthZEN_AClientWrittenFromTheSpecification: the issue's "done
// when", as a PEP that knows only the specification sees it: an allowed
// call is true; a denied one false; one a human decides false, with the
// pending call's id in the context; once a person approved it, the same
// evaluation is true once, and false for other arguments; a call a
// session grant covers is true. Without a token the request is refused
// 401 with WWW-Authenticate, and an agent may not evaluate as another.
func TestAuthZEN_AClientWrittenFromTheSpecification(t *testing.T) {
	t.Parallel()
	h := startAuthZEN(t)
	pep := discoverPEP(t, h.url, "agent-token-000000001")
	agent := map[string]any{"type": "agent", "id": "bot-1"}
	call := func(id string, args map[string]any) map[string]any {
		return map[string]any{"type": "tool_call", "id": id, "properties": map[string]any{"arguments": args, "conversationId": "pep"}}
	}
	decision := func(d map[string]any) bool { return d["decision"].(bool) }
	reason := func(d map[string]any) any { return d["context"].(map[string]any)["reason"] }

	status, d := pep.evaluate(agent, map[string]any{"name": "read_file"}, call("r1", map[string]any{"path": "README.md"}))
	require.Equal(t, http.StatusOK, status)
	assert.True(t, decision(d), "allowed: %v", d)

	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, call("d0", map[string]any{"env": "prod"}))
	assert.False(t, decision(d), "denied: %v", d)
	assert.Equal(t, "policy_denied", reason(d))

	staging := call("d1", map[string]any{"env": "staging"})
	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, staging)
	assert.False(t, decision(d), "asked: %v", d)
	ctx := d["context"].(map[string]any)
	assert.Equal(t, "approval_required", ctx["reason"])
	pendingID, _ := ctx["pending_id"].(string)
	require.Equal(t, "pep.d1", pendingID, "the pending call: %v", ctx)
	follow := ctx["follow"].(map[string]any)
	assert.Equal(t, h.url+"/v1/tool-calls/pep.d1", follow["call"])
	assert.Equal(t, h.url+"/#/calls/pep.d1", follow["inbox"])
	assert.NotEmpty(t, ctx["binding"].(map[string]any)["arguments_digest"])

	require.Equal(t, http.StatusOK, h.do("POST", "/v1/tool-calls/pep.d1/decision", "alice-token-000000001", wire.DecideRequest{Approved: true}, nil))
	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, call("d1", map[string]any{"env": "qa"}))
	assert.False(t, decision(d), "other arguments under its id: %v", d)
	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, call("d2", map[string]any{"env": "qa"}))
	assert.False(t, decision(d), "other arguments as another call: %v", d)
	assert.Equal(t, "approval_required", reason(d))
	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, staging)
	assert.True(t, decision(d), "approved: %v", d)
	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, staging)
	assert.False(t, decision(d), "once: %v", d)

	require.Equal(t, http.StatusOK, h.do("POST", "/v1/tool-calls/pep.d2/decision", "alice-token-000000001",
		wire.DecideRequest{Approved: true, Scope: "session", ForMs: 3_600_000}, nil))
	_, d = pep.evaluate(agent, map[string]any{"name": "deploy"}, call("d3", map[string]any{"env": "qa"}))
	assert.True(t, decision(d), "a session grant covers a like call: %v", d)
	assert.Equal(t, "granted", reason(d))

	status, _ = (&specPEP{t: t, evaluation: pep.evaluation}).evaluate(agent, map[string]any{"name": "read_file"}, call("r2", nil))
	assert.Equal(t, http.StatusUnauthorized, status)
	resp, _ := postJSON(t, pep.evaluation, "", "", []byte(`{}`))
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
	status, _ = pep.evaluate(map[string]any{"type": "agent", "id": "bot-2"}, map[string]any{"name": "read_file"}, call("r3", nil))
	assert.Equal(t, http.StatusForbidden, status, "an agent evaluates as itself")
}

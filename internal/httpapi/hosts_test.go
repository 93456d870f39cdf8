package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
)

// hostClient sends requests to the API at url naming a host of its
// choice in their Host header, as a browser does for a name that a
// rebinding DNS answer points at the API's address.
type hostClient struct {
	t   *testing.T
	url string
}

// send makes one request and returns its status and body.
func (c hostClient) send(method, host, path, token string, body any) (int, []byte, http.Header) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(c.t, err)
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	require.NoError(c.t, err)
	req.Host = host
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, data, resp.Header
}

// assertMisdirected checks a refusal: 421 in the API's one error shape.
func assertMisdirected(t *testing.T, status int, body []byte, h http.Header, what string) {
	t.Helper()
	assert.Equal(t, http.StatusMisdirectedRequest, status, what)
	assert.Equal(t, "application/json", h.Get("Content-Type"), what)
	var e httpapi.ErrorBody
	require.NoError(t, json.Unmarshal(body, &e), "%s: %s", what, body)
	assert.Equal(t, "misdirected_request", e.Error.Code, what)
	assert.Contains(t, e.Error.Message, "does not answer to the host", what)
}

// TestAPI_AllowedHosts: a request naming a host not on the list is
// refused 421, whatever it asks for and whoever sends it, and changes
// nothing; one naming an allowed host, on any port, in any case, is served.
func TestAPI_AllowedHosts(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "http"}, Policy: testPolicy, Tokens: tokens})
	toks, err := httpapi.ParseTokens([]byte(tokens))
	require.NoError(t, err)
	api, err := httpapi.New(httpapi.Config{
		Gate: g.Service, Events: bustest.RunEventsFeed(t, g.JS), Tokens: toks, Log: bustest.Logger(),
		AllowedHosts: []string{"toolgate.example.com", "*.internal.example", "10.0.0.7"},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	c := hostClient{t: t, url: srv.URL}
	call := machine.Call{ToolCallID: "c1", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: "hosts"}

	for _, host := range []string{"evil.example", "evil.example:8080", "internal.example", "toolgate.example.com.evil.example", "127.0.0.1", "localhost"} {
		for _, r := range []struct{ method, path, token string }{
			{"POST", "/v1/tool-calls", "agent-token-000000001"},
			{"GET", "/v1/tool-calls", viewerToken},
			{"GET", "/v1/me", adminToken},
			{"GET", "/v1/events", viewerToken},
			{"GET", "/metrics", ""},
			{"GET", "/", ""},
			{"GET", "/v1/no-such-route", ""},
		} {
			var body any
			if r.method == "POST" {
				body = call
			}
			status, data, h := c.send(r.method, host, r.path, r.token, body)
			assertMisdirected(t, status, data, h, fmt.Sprintf("%s %s with Host %s", r.method, r.path, host))
		}
	}
	var list struct{ Items []machine.Entry }
	status, data, _ := c.send("GET", "toolgate.example.com", "/v1/tool-calls", viewerToken, nil)
	require.Equal(t, http.StatusOK, status, "%s", data)
	require.NoError(t, json.Unmarshal(data, &list))
	assert.Empty(t, list.Items, "a refused submit submitted nothing")

	// The health checks answer anyone: a probe asks by the pod's
	// address, and they tell nothing.
	for _, path := range []string{"/healthz", "/readyz"} {
		status, _, _ := c.send("GET", "10.9.9.9:8080", path, "", nil)
		assert.Equal(t, http.StatusOK, status, path)
	}

	for _, host := range []string{"toolgate.example.com", "toolgate.example.com:8443", "TOOLGATE.Example.COM.", "ops.internal.example", "a.b.internal.example:80", "10.0.0.7:8080"} {
		status, data, _ := c.send("GET", host, "/v1/me", viewerToken, nil)
		assert.Equal(t, http.StatusOK, status, "Host %s: %s", host, data)
	}
	status, data, _ = c.send("POST", "toolgate.example.com", "/v1/tool-calls", "agent-token-000000001", call)
	assert.Equal(t, http.StatusCreated, status, "%s", data)
}

// TestAPI_OpenOnLoopbackRefusesARebindingPage: toolgate serve's API, open
// (no tokens) on loopback, answers requests naming loopback only: a page
// whose name was rebound to 127.0.0.1 cannot cancel a conversation.
func TestAPI_OpenOnLoopbackRefusesARebindingPage(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake", "http"}, Policy: testPolicy})
	e, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: "c1", ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`),
		ConversationID: "rebind", CallerBotID: "bot-1"})
	require.NoError(t, err)
	u, err := url.Parse(g.HTTPURL)
	require.NoError(t, err)
	// The server itself: its listener, its handler, its default list.
	c := hostClient{t: t, url: g.HTTPURL}

	status, data, h := c.send("POST", "rebind.evil.example:"+u.Port(), "/v1/conversations/rebind/cancel", "", map[string]any{})
	assertMisdirected(t, status, data, h, "the rebinding page's cancel")
	got, err := g.Client.Get(t.Context(), e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "nothing was cancelled")

	for _, host := range []string{"127.0.0.1:" + u.Port(), "localhost:" + u.Port(), "[::1]:" + u.Port()} {
		status, data, _ := c.send("GET", host, "/v1/me", "", nil)
		assert.Equal(t, http.StatusOK, status, "Host %s: %s", host, data)
	}
}

func TestDefaultAllowedHosts(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string][]string{
		"127.0.0.1:8080":      {"localhost", "127.0.0.1", "::1"},
		"localhost:8080":      {"localhost", "127.0.0.1", "::1"},
		"[::1]:8080":          {"localhost", "127.0.0.1", "::1"},
		"10.1.2.3:8080":       {"localhost", "127.0.0.1", "::1", "10.1.2.3"},
		"Toolgate.Local:8080": {"localhost", "127.0.0.1", "::1", "toolgate.local"},
		"0.0.0.0:8080":        {"*"}, // every address: the names clients use cannot be known
		"[::]:8080":           {"*"},
		":8080":               {"*"},
	} {
		assert.Equal(t, want, httpapi.DefaultAllowedHosts(listen), listen)
	}
}

func TestCheckAllowedHosts(t *testing.T) {
	t.Parallel()
	assert.NoError(t, httpapi.CheckAllowedHosts(nil))
	assert.NoError(t, httpapi.CheckAllowedHosts([]string{"*", "toolgate.example.com", "*.internal.example", "10.0.0.7", "::1", "[::1]"}))
	for entry, want := range map[string]string{
		"":                          "an empty host name",
		"*.":                        "an empty host name",
		"toolgate.example.com:8080": `"toolgate.example.com:8080": want a host name without a port`,
		"https://toolgate.example":  `"https://toolgate.example": want a host name or IP address, not a URL`,
		"tool*.example.com":         `"tool*.example.com": * stands only for a whole host`,
		"*.*.example.com":           `"*.*.example.com": * stands only`,
	} {
		err := httpapi.CheckAllowedHosts([]string{"ok.example", entry})
		if assert.Error(t, err, entry) {
			assert.Contains(t, err.Error(), want, entry)
		}
	}
}

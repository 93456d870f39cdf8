package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Config is what the HTTP API serves from.
type Config struct {
	Gate *gate.Service
	// Events is the process's feed of TOOL_EVENTS, which event streams
	// (GET /v1/events) follow: *views.EventsFeed.
	Events EventFollower
	// Await is what Claude Code's HTTP hooks wait for a call with.
	Await  AwaitFunc
	Tokens *Tokens // nil or empty, and no OIDC: open (loopback only)
	// OIDC, when enabled, signs people in at an OpenID provider and takes
	// its tokens as bearer tokens, beside Tokens.
	OIDC OIDC
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Ready reports whether the process can serve (NATS connected,
	// buckets there); nil means always.
	Ready func(ctx context.Context) error
	// AllowedHosts are the Host header values the API answers (see
	// CheckAllowedHosts for the forms; DefaultAllowedHosts for a listen
	// address). nil: localhost, 127.0.0.1 and ::1.
	AllowedHosts []string
	// SlackResponseURL reports whether toolgate may POST a click's answer
	// to a Slack payload's response_url (nil: https://hooks.slack.com/
	// only, so a signed payload cannot make toolgate call anywhere else).
	SlackResponseURL func(*url.URL) bool
	// HTTPClient sends those answers (nil: a client of its own).
	HTTPClient *http.Client
	Log        *slog.Logger
}

// AwaitFunc waits for a call's outcome, reading the call with read:
// client.AwaitWith over the process's NATS connection, which hears the
// calls' announcements.
type AwaitFunc func(ctx context.Context, read client.ReadFunc, pendingID string, opts ...client.AwaitOption) (client.Outcome, error)

// EventFollower hands fn every event of TOOL_EVENTS from sequence from on
// (0: those to come), in order and once each, until ctx ends, having
// called started once every event to come will reach fn; LastSeq says
// how far the stream goes.
type EventFollower interface {
	Follow(ctx context.Context, from uint64, started func(), fn func(seq uint64, subject string, data []byte)) error
	LastSeq(ctx context.Context) (uint64, error)
}

// Server is the HTTP API.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	hosts *allowedHosts
	oidc  *oidcAuth // nil without single sign-on
}

// route is one endpoint: who may call it and what it does. The table is
// the one list of the API: it registers the handlers and the OpenAPI test
// checks the document against it. A route that is a use case of gate is
// answer(use case); the others (event streams, Claude Code's hooks,
// Slack's signed posts, decision links, the AuthZEN API, whose requests
// are read as its specification says, the process's own endpoints)
// have handlers of their own.
type route struct {
	method, path string
	roles        []Role // nil: anyone, no token needed; empty: anyone signed in
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, u User) error
}

var readers = []Role{RoleViewer, RoleAgent, RoleApprover}

// runners may report on a call they run: an agent on its own calls (it
// runs its own tools), an executor on any.
var runners = []Role{RoleAgent, RoleExecutor}

var routes = []route{
	{"POST", "/v1/tool-calls", []Role{RoleAgent}, answer(submit)},
	{"GET", "/v1/tool-calls", readers, answer((*gate.Service).Page)},
	{"GET", "/v1/tool-calls/{pendingId}", readers, answer((*gate.Service).Get)},
	{"GET", "/v1/tool-calls/{pendingId}/history", readers, answer((*gate.Service).History)},
	{"GET", "/v1/tool-calls/{pendingId}/receipts", readers, answer((*gate.Service).Receipts)},
	{"POST", "/v1/tool-calls/{pendingId}/reveal", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).Reveal)},
	{"GET", "/v1/receipts/key", nil, answer((*gate.Service).ReceiptKeys)},
	{"POST", "/v1/tool-calls/{pendingId}/decision", []Role{RoleApprover}, answer((*gate.Service).Decide)},
	{"POST", "/v1/decisions", []Role{RoleApprover}, answer((*gate.Service).DecideMatching)},
	{"GET", "/v1/grants", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).Grants)},
	{"POST", "/v1/grants/{id}/revoke", []Role{RoleApprover}, answer((*gate.Service).RevokeGrant)},
	{"GET", "/v1/tool-calls/{pendingId}/grant-preview", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).GrantPreview)},
	{"POST", "/v1/respond", []Role{RoleApprover}, answer((*gate.Service).Respond)},
	{"POST", "/v1/tool-calls/{pendingId}/cancel", []Role{RoleAgent, RoleApprover}, answer(cancelled((*gate.Service).Cancel))},
	{"POST", "/v1/tool-calls/{pendingId}/rerun", []Role{RoleApprover}, answer((*gate.Service).Rerun)},
	{"POST", "/v1/conversations/{conversationId}/cancel", []Role{RoleAgent, RoleApprover}, answer(cancelled((*gate.Service).CancelConversation))},
	// Reports on a call its caller runs: started claims it, under a lease.
	{"POST", "/v1/tool-calls/{pendingId}/started", runners, answer((*gate.Service).ClaimAt)},
	{"POST", "/v1/tool-calls/{pendingId}/heartbeat", runners, answer((*gate.Service).Heartbeat)},
	{"POST", "/v1/tool-calls/{pendingId}/succeeded", runners, answer((*gate.Service).Complete)},
	{"POST", "/v1/tool-calls/{pendingId}/failed", runners, answer((*gate.Service).Fail)},
	{"GET", "/v1/events", readers, (*Server).events},
	{"POST", claudeCodeHookPath, []Role{RoleAgent}, (*Server).claudeCodeHook},
	{"GET", "/v1/analytics", []Role{RoleViewer, RoleApprover}, answer(analyticsReport)},
	{"GET", "/v1/budgets", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).Budgets)},
	{"GET", "/v1/rate-limits", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).RateLimits)},
	// Anyone signed in, a person with no role too: the inbox says so.
	{"GET", "/v1/me", []Role{}, (*Server).me},
	{"POST", slackInteractionsPath, nil, (*Server).slackInteraction},
	{"GET", "/v1/decision-tokens/{token}", nil, (*Server).showDecisionToken},
	{"POST", "/v1/decision-tokens/{token}", nil, (*Server).redeemDecisionToken},
	{"GET", "/v1/openapi.json", nil, (*Server).openAPI},
	{"GET", "/v1/schemas/event.json", nil, (*Server).eventSchema},
	{"GET", "/healthz", nil, (*Server).healthz},
	{"GET", "/readyz", nil, (*Server).readyz},
	{"GET", "/metrics", nil, (*Server).metrics},
	{"POST", "/v1/policy/dry-run", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).PolicyDryRun)},
	{"POST", "/v1/policy/explain", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).PolicyExplain)},
	// The shadow policy.
	{"GET", "/v1/policy/shadow", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).PolicyShadow)},
	{"POST", "/v1/policy/shadow", []Role{RoleAdmin}, answer((*gate.Service).SetPolicyShadow)},
	{"POST", "/v1/policy/shadow/clear", []Role{RoleAdmin}, answer((*gate.Service).ClearPolicyShadow)},
	{"POST", "/v1/policy/shadow/promote", []Role{RoleAdmin}, answer((*gate.Service).PromotePolicyShadow)},
	{"GET", "/v1/policy/shadow/report", []Role{RoleViewer, RoleApprover}, answer((*gate.Service).PolicyShadowReport)},
	// The OpenID AuthZEN Authorization API (authzen.go).
	{"POST", wire.AuthZENEvaluationPath, []Role{RoleAgent}, (*Server).accessEvaluation},
	{"POST", wire.AuthZENEvaluationsPath, []Role{RoleAgent}, (*Server).accessEvaluations},
	{"GET", wire.AuthZENConfigurationPath, nil, (*Server).authzenConfiguration},
}

// New returns the API server, or what is wrong with cfg.OIDC.
func New(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, mux: http.NewServeMux(), hosts: newAllowedHosts(cfg.AllowedHosts)}
	if cfg.OIDC.Enabled() {
		a, err := newOIDCAuth(cfg.OIDC)
		if err != nil {
			return nil, err
		}
		s.oidc = a
	}
	for _, rt := range routes {
		s.mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			s.serve(w, r, rt)
		})
	}
	s.mux.Handle("GET /", inbox())
	// The inbox's sign-in: pages a browser is sent to, not the API's.
	s.mux.HandleFunc("GET "+infoPath, s.signInInfo)
	if s.oidc != nil {
		s.mux.HandleFunc("GET "+loginPath, s.login)
		s.mux.HandleFunc("GET "+callbackPath, s.callback)
		s.mux.HandleFunc("POST "+logoutPath, s.logout)
	}
	return s, nil
}

// open reports whether the API is open: no tokens and no sign-in.
func (s *Server) open() bool { return s.cfg.Tokens.Open() && s.oidc == nil }

// authenticate returns the request's user: a bearer token's (the token
// file's, else the OpenID provider's), else the inbox's session's, or
// on an open API the name the request gives. session says the user came
// by the session cookie, which a browser sends whatever page asked.
func (s *Server) authenticate(r *http.Request, queryToken bool) (u User, session bool, err error) {
	if s.open() {
		return openUser(r), false, nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && queryToken {
		token = r.URL.Query().Get("access_token")
	}
	if token != "" {
		if u, ok := s.cfg.Tokens.lookup(token); ok {
			return u, false, nil
		}
		if s.oidc == nil || strings.Count(token, ".") != 2 {
			return User{}, false, errUnauthorized("a valid bearer token is required")
		}
		u, _, err := s.oidc.verify(r.Context(), token, true)
		return u, false, err
	}
	if s.oidc != nil {
		if u, ok := s.oidc.sessionUser(r); ok {
			return u, true, nil
		}
		return User{}, false, errUnauthorized("sign in, or give a valid bearer token")
	}
	return User{}, false, errUnauthorized("a valid bearer token is required")
}

// pathMatches reports whether path fits a route's pattern, whose {name}
// segments match any one segment but an empty one, as the mux's do.
func pathMatches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, p := range ps {
		if strings.HasPrefix(p, "{") && xs[i] == "" || !strings.HasPrefix(p, "{") && p != xs[i] {
			return false
		}
	}
	return true
}

// ServeHTTP implements http.Handler. A request whose Host header is not an
// allowed host is refused with 421, whatever it asks for (the health
// checks aside: a probe asks by the pod's address, and they tell nothing).
// What neither a route of the API nor the inbox takes is refused in the
// API's one error shape, not the mux's plain text (nor the inbox's page):
// 405 for a path that takes other methods, else 404. The mux's redirects
// of unclean paths ("/v1//x", "/a/../b") are left to it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.hosts.allows(r.Host) && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
		host := r.Host
		if len(host) > 100 {
			host = host[:100] + "…"
		}
		err := httpErr(http.StatusMisdirectedRequest, "misdirected_request",
			fmt.Sprintf("this server does not answer to the host %q (allowed hosts: --allowed-hosts)", host))
		if strings.HasPrefix(r.URL.Path, strings.TrimSuffix(claudeCodeHookPath, "{hook}")) {
			// Claude Code runs the call of a hook answered an error.
			s.refuseClaudeCodeHook(w, r, err)
			return
		}
		writeError(w, s.cfg.Log, err)
		return
	}
	_, pattern := s.mux.Handler(r)
	if cleanPath(r.URL.Path) && (pattern == "" ||
		// The inbox has the files, but none under the API's paths.
		pattern == "GET /" && (strings.HasPrefix(r.URL.Path, "/v1/") || !inboxHas(r.URL.Path))) {
		s.unrouted(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPath reports whether the mux takes p as it is, rather than
// redirecting to its clean form.
func cleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// allowed lists the methods some route takes at path, as the Allow header
// says them: a GET route answers HEAD too, as the mux has it.
func allowed(p string) []string {
	var allow []string
	add := func(methods ...string) {
		for _, m := range methods {
			if !slices.Contains(allow, m) {
				allow = append(allow, m)
			}
		}
	}
	for _, rt := range routes {
		if pathMatches(rt.path, p) {
			add(rt.method)
			if rt.method == http.MethodGet {
				add(http.MethodHead)
			}
		}
	}
	if len(allow) == 0 && !strings.HasPrefix(p, "/v1/") && inboxHas(p) {
		add(http.MethodGet, http.MethodHead)
	}
	return allow
}

func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	allow := allowed(r.URL.Path)
	if len(allow) == 0 {
		writeError(w, s.cfg.Log, httpErr(http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path+" (see /v1/openapi.json)"))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, s.cfg.Log, httpErr(http.StatusMethodNotAllowed, "method_not_allowed",
		fmt.Sprintf("%s %s: the endpoint takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))))
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt route) {
	echoRequestID(w, r, rt.path)
	refuse := func(err error) { writeError(w, s.cfg.Log, err) }
	if rt.path == claudeCodeHookPath {
		// Claude Code runs a call whose hook answers an error: its hooks
		// refuse in the hook's own answer (see refuseClaudeCodeHook).
		refuse = func(err error) { s.refuseClaudeCodeHook(w, r, err) }
	}
	if err := boundedRequest(r); err != nil {
		refuse(err)
		return
	}
	if r.Method == http.MethodPost {
		// A web page elsewhere can make a browser send a "simple" POST
		// (a form's content type, no custom header) with the user's
		// credentials and no CORS check. Every POST here takes JSON, which
		// no simple request may say it is, and a request a browser marks
		// as coming from another origin is refused outright.
		// Slack's form alone is taken, on its endpoint, where its signature
		// is the credential and no browser can make one.
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); (err != nil || mt != "application/json") && rt.path != slackInteractionsPath {
			refuse(httpErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json"))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
			refuse(httpErr(http.StatusForbidden, "forbidden", fmt.Sprintf("cross-origin request from %s refused", origin)))
			return
		}
	}
	var u User
	if rt.roles != nil {
		// EventSource cannot set headers, so the event stream alone takes
		// its token in the query; anywhere else it would end up in logs
		// and Referer headers for nothing.
		var session bool
		var err error
		if u, session, err = s.authenticate(r, rt.path == "/v1/events"); err != nil {
			if he := (*httpError)(nil); errors.As(err, &he) && he.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			}
			refuse(err)
			return
		}
		if session && r.Method != http.MethodGet && r.Header.Get("Origin") == "" {
			// The cookie goes with whatever page asked: a change made
			// by it must come from a page that says where it is, and
			// is this server's (a different one was refused above).
			refuse(httpErr(http.StatusForbidden, "forbidden", "a request signed in by the inbox's session must come from the inbox's page (Origin)"))
			return
		}
		if len(rt.roles) > 0 && !u.Can(rt.roles...) {
			refuse(httpErr(http.StatusForbidden, "forbidden",
				fmt.Sprintf("%s may not %s %s: needs one of the roles %v", u.Name, rt.method, rt.path, rt.roles)))
			return
		}
	}
	if err := rt.handle(s, w, r, u); err != nil {
		refuse(err)
	}
}

// sameOrigin reports whether an Origin header names the host the request
// came to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host == host
}

// httpError is a refusal of HTTP's own (401, 413, 415, …).
type httpError struct {
	status  int
	code    string
	message string
}

func (e *httpError) Error() string { return e.message }

func httpErr(status int, code, message string) error {
	return &httpError{status: status, code: code, message: message}
}

// ErrorBody is every error's JSON, the same as the request API's: a code,
// a message naming what was wrong and, on a conflict, the entry as it is now.
type ErrorBody = wire.ErrorBody

func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	var he *httpError
	var te *machine.TransitionError
	body := ErrorBody{Error: wire.ErrorDetail{Message: err.Error()}}
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &he):
		status, body.Error.Code = he.status, he.code
	default:
		status, body.Error.Code = wire.ErrorStatus(err)
		if errors.As(err, &te) {
			body.Error.Entry = te.Entry
		}
	}
	if status == http.StatusInternalServerError && log != nil {
		log.Error("request failed", "err", err)
		body.Error.Message = "internal error"
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxUserHeader bounds X-Toolgate-User, the name a request gives itself
// on a server without tokens: as long as a credential's name may be.
const maxUserHeader = 64

// boundedRequest refuses a request whose path segments, query values or
// X-Toolgate-User are longer than a request's strings may be
// (wire.MaxString), naming what is too long: each may end up in a key,
// a subject or a stored entry.
func boundedRequest(r *http.Request) error {
	if n := len(r.Header.Get("X-Toolgate-User")); n > maxUserHeader {
		return fmt.Errorf("%w: X-Toolgate-User: at most %d bytes, got %d", machine.ErrInvalid, maxUserHeader, n)
	}
	for seg := range strings.SplitSeq(r.URL.Path, "/") {
		if n := len(seg); n > wire.MaxString {
			return fmt.Errorf("%w: path: a segment of at most %d bytes, got %d", machine.ErrInvalid, wire.MaxString, n)
		}
	}
	for name, values := range r.URL.Query() {
		if len(name) > wire.MaxString {
			return fmt.Errorf("%w: query: a name of at most %d bytes, got %d", machine.ErrInvalid, wire.MaxString, len(name))
		}
		for _, v := range values {
			if n := len(v); n > wire.MaxString {
				return fmt.Errorf("%w: %s: at most %d bytes, got %d", machine.ErrInvalid, name, wire.MaxString, n)
			}
		}
	}
	return nil
}

// Me is who the caller is, for the inbox to show the right buttons.
type Me struct {
	ID    string `json:"id"`
	Roles []Role `json:"roles"`
	Open  bool   `json:"open"` // no tokens configured
	// Groups are the groups the caller is in, as their sign-in says:
	// a call whose approvers name one of them (group:NAME) is theirs to
	// decide.
	Groups []string `json:"groups,omitempty"`
	// Identity is who the caller is at the OpenID provider that signed
	// them in, if one did.
	Identity *machine.Identity `json:"identity,omitempty"`
	// Session says the caller is signed in by the inbox's session
	// cookie, which POST /auth/logout ends.
	Session bool `json:"session,omitempty"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request, u User) error {
	_, bearer := r.Header["Authorization"]
	writeJSON(w, http.StatusOK, Me{ID: u.Name, Roles: u.Roles, Groups: u.Groups, Open: s.open(), Identity: u.Identity, Session: u.Identity != nil && !bearer})
	return nil
}

//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request, _ User) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}

// eventSchema serves the events' JSON Schema (docs/events.md).
func (s *Server) eventSchema(w http.ResponseWriter, _ *http.Request, _ User) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(wire.EventSchema)
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ User) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ User) error {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(r.Context()); err != nil {
			return httpErr(http.StatusServiceUnavailable, "not_ready", err.Error())
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ User) error {
	g := s.cfg.Gatherer
	if g == nil {
		g = prometheus.NewRegistry()
	}
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

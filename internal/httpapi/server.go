package httpapi

import (
	"cmp"
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
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Config is what the HTTP API serves from.
type Config struct {
	Gate *gate.Service
	JS   jetstream.JetStream // a list's position in TOOL_EVENTS
	// Events is the process's feed of TOOL_EVENTS, which event streams
	// (GET /v1/events) follow: *bus.EventsFeed.
	Events EventFollower
	Tokens *Tokens // nil or empty: open (loopback only)
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Ready reports whether the process can serve (NATS connected,
	// buckets there); nil means always.
	Ready func(ctx context.Context) error
	// Analytics, when set, serves GET /v1/analytics.
	Analytics http.Handler
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

// EventFollower hands fn every event of TOOL_EVENTS from sequence from on
// (0: those to come), in order and once each, until ctx ends, having
// called started once every event to come will reach fn.
type EventFollower interface {
	Follow(ctx context.Context, from uint64, started func(), fn func(seq uint64, subject string, data []byte)) error
}

// Server is the HTTP API.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	hosts *allowedHosts
}

// route is one endpoint: who may call it and what it does. The table is
// the one list of the API: it registers the handlers and the OpenAPI test
// checks the document against it.
type route struct {
	method, path string
	roles        []Role // nil: anyone, no token needed
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, u User) error
}

var readers = []Role{RoleViewer, RoleAgent, RoleApprover}

// runners may report on a call they run: an agent on its own calls (it
// runs its own tools), an executor on any.
var runners = []Role{RoleAgent, RoleExecutor}

var routes = []route{
	{"POST", "/v1/tool-calls", []Role{RoleAgent}, (*Server).submit},
	{"GET", "/v1/tool-calls", readers, (*Server).list},
	{"GET", "/v1/tool-calls/{pendingId}", readers, (*Server).get},
	{"GET", "/v1/tool-calls/{pendingId}/history", readers, (*Server).history},
	{"GET", "/v1/tool-calls/{pendingId}/receipts", readers, (*Server).receipts},
	{"GET", "/v1/receipts/key", nil, (*Server).receiptKeys},
	{"POST", "/v1/tool-calls/{pendingId}/decision", []Role{RoleApprover}, (*Server).decision},
	{"POST", "/v1/decisions", []Role{RoleApprover}, (*Server).decideMatching},
	{"GET", "/v1/grants", []Role{RoleViewer, RoleApprover}, (*Server).grants},
	{"POST", "/v1/grants/{id}/revoke", []Role{RoleApprover}, (*Server).revokeGrant},
	{"GET", "/v1/tool-calls/{pendingId}/grant-preview", []Role{RoleViewer, RoleApprover}, (*Server).grantPreview},
	{"POST", "/v1/respond", []Role{RoleApprover}, (*Server).respond},
	{"POST", "/v1/tool-calls/{pendingId}/cancel", []Role{RoleAgent, RoleApprover}, (*Server).cancel},
	{"POST", "/v1/conversations/{conversationId}/cancel", []Role{RoleAgent, RoleApprover}, (*Server).cancelConversation},
	{"POST", "/v1/tool-calls/{pendingId}/started", runners, (*Server).started},
	{"POST", "/v1/tool-calls/{pendingId}/heartbeat", runners, (*Server).heartbeat},
	{"POST", "/v1/tool-calls/{pendingId}/succeeded", runners, (*Server).succeeded},
	{"POST", "/v1/tool-calls/{pendingId}/failed", runners, (*Server).failed},
	{"GET", "/v1/events", readers, (*Server).events},
	{"POST", claudeCodeHookPath, []Role{RoleAgent}, (*Server).claudeCodeHook},
	{"GET", "/v1/analytics", []Role{RoleViewer, RoleApprover}, (*Server).analytics},
	{"GET", "/v1/budgets", []Role{RoleViewer, RoleApprover}, (*Server).budgets},
	{"GET", "/v1/rate-limits", []Role{RoleViewer, RoleApprover}, (*Server).rateLimits},
	{"GET", "/v1/me", readers, (*Server).me},
	{"POST", slackInteractionsPath, nil, (*Server).slackInteraction},
	{"GET", "/v1/decision-tokens/{token}", nil, (*Server).showDecisionToken},
	{"POST", "/v1/decision-tokens/{token}", nil, (*Server).redeemDecisionToken},
	{"GET", "/v1/openapi.json", nil, (*Server).openAPI},
	{"GET", "/v1/schemas/event.json", nil, (*Server).eventSchema},
	{"GET", "/healthz", nil, (*Server).healthz},
	{"GET", "/readyz", nil, (*Server).readyz},
	{"GET", "/metrics", nil, (*Server).metrics},
	{"POST", "/v1/policy/dry-run", []Role{RoleViewer, RoleApprover}, (*Server).policyDryRun},
	{"POST", "/v1/policy/explain", []Role{RoleViewer, RoleApprover}, (*Server).policyExplain},
	// The shadow policy (shadow.go).
	{"GET", "/v1/policy/shadow", []Role{RoleViewer, RoleApprover}, (*Server).shadowPolicy},
	{"POST", "/v1/policy/shadow", []Role{RoleAdmin}, (*Server).setShadowPolicy},
	{"POST", "/v1/policy/shadow/clear", []Role{RoleAdmin}, (*Server).clearShadowPolicy},
	{"POST", "/v1/policy/shadow/promote", []Role{RoleAdmin}, (*Server).promoteShadowPolicy},
	{"GET", "/v1/policy/shadow/report", []Role{RoleViewer, RoleApprover}, (*Server).shadowPolicyReport},
}

// New returns the API server.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, mux: http.NewServeMux(), hosts: newAllowedHosts(cfg.AllowedHosts)}
	for _, rt := range routes {
		s.mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			s.serve(w, r, rt)
		})
	}
	s.mux.Handle("GET /", inbox())
	return s
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
		var ok bool
		// EventSource cannot set headers, so the event stream alone takes
		// its token in the query; anywhere else it would end up in logs
		// and Referer headers for nothing.
		if u, ok = s.cfg.Tokens.authenticate(r, rt.path == "/v1/events"); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			refuse(httpErr(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required"))
			return
		}
		if !u.Can(rt.roles...) {
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

// maxBody bounds a request body: tool arguments are small.
const maxBody = 1 << 20

// readJSON decodes a JSON request body into v, refusing other media types,
// bodies over maxBody, unknown fields and trailing data.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return httpErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return httpErr(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body over %d bytes", maxBody))
		}
		return fmt.Errorf("%w: request body: %v", machine.ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: request body: more than one JSON value", machine.ErrInvalid)
	}
	return wire.CheckBounds(v)
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request, u User) error {
	var c machine.Call
	if err := readJSON(w, r, &c); err != nil {
		return err
	}
	e, created, err := s.cfg.Gate.SubmitOnce(r.Context(), u, c)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK // a retry: the entry an earlier submit made
	}
	w.Header().Set("Location", "/v1/tool-calls/"+e.PendingID)
	writeJSON(w, status, e)
	return nil
}

// Page is a page of entries, oldest first.
type Page struct {
	wire.ListReply
	// EventsSeq is the TOOL_EVENTS sequence read before the entries: a
	// client that then follows /v1/events?since=EventsSeq misses nothing.
	EventsSeq uint64 `json:"eventsSeq"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, u User) error {
	q := r.URL.Query()
	req := wire.ListRequest{
		ConversationID: q.Get("conversationId"), ToolName: q.Get("toolName"), CallerBotID: q.Get("callerBotId"),
		Status: machine.State(q.Get("status")), Cursor: q.Get("cursor"),
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%w: limit: want a number, got %q", machine.ErrInvalid, v)
		}
		req.Limit = n
	}
	seq, err := s.eventsSeq(r.Context())
	if err != nil {
		return err
	}
	page, err := s.cfg.Gate.List(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, Page{ListReply: page, EventsSeq: seq})
	return nil
}

func (s *Server) eventsSeq(ctx context.Context) (uint64, error) {
	st, err := s.cfg.JS.Stream(ctx, wire.EventsStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, u User) error {
	e, err := s.cfg.Gate.Get(r.Context(), u, wire.GetRequest{PendingID: r.PathValue("pendingId")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// HistoryItem is one transition of an entry.
type HistoryItem = wire.HistoryItem

func (s *Server) history(w http.ResponseWriter, r *http.Request, u User) error {
	items, err := s.cfg.Gate.History(r.Context(), u, wire.GetRequest{PendingID: r.PathValue("pendingId")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, items)
	return nil
}

// DecisionRequest is the body of POST /v1/tool-calls/{pendingId}/decision:
// wire.DecideRequest without the pending id (the path names it) or the
// approver (the credential names them), and with approved required.
type DecisionRequest struct {
	Approved  *bool           `json:"approved"`
	Reason    string          `json:"reason,omitempty" max:"4096"`
	Scope     machine.Scope   `json:"scope,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ForMs bounds the grant a session or always approval records.
	ForMs int64 `json:"forMs,omitempty"`
	// PersistRule writes an always approval into the policy (admins).
	PersistRule bool `json:"persistRule,omitempty"`
	// SingleUse makes the grant good for one call.
	SingleUse bool `json:"singleUse,omitempty"`
	// RequestID names the decision across the times it is sent
	// (wire.DecideRequest.RequestID).
	RequestID string `json:"requestId,omitempty" max:"64"`
	// Result answers a respondable call with the tool's result instead
	// of approving or rejecting it (wire.DecideRequest.Result), with
	// approved false (which may then be left out).
	Result json.RawMessage `json:"result,omitempty"`
	// Interrupt, on a rejection, asks the agent to stop its turn.
	Interrupt bool `json:"interrupt,omitempty"`
}

// request is d as the request API takes it, deciding the call pendingID.
func (d DecisionRequest) request(pendingID string) (wire.DecideRequest, error) {
	if d.Approved == nil && len(d.Result) == 0 {
		return wire.DecideRequest{}, fmt.Errorf("%w: approved: required, true or false (or a result, to answer the call with it)", machine.ErrInvalid)
	}
	return wire.DecideRequest{
		PendingID: pendingID, Approved: d.Approved != nil && *d.Approved, Reason: d.Reason, Scope: d.Scope, Arguments: d.Arguments,
		ForMs: d.ForMs, PersistRule: d.PersistRule, SingleUse: d.SingleUse, RequestID: d.RequestID,
		Result: d.Result, Interrupt: d.Interrupt,
	}, nil
}

func (s *Server) decision(w http.ResponseWriter, r *http.Request, u User) error {
	var d DecisionRequest
	if err := readJSON(w, r, &d); err != nil {
		return err
	}
	return s.decide(w, r, u, r.PathValue("pendingId"), d)
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, u User, id string, d DecisionRequest) error {
	req, err := d.request(id)
	if err != nil {
		return err
	}
	e, err := s.cfg.Gate.Decide(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// decideMatching decides every pending call a pattern covers (body:
// wire.DecideMatchingRequest).
func (s *Server) decideMatching(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.DecideMatchingRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.DecideMatching(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

func (s *Server) grants(w http.ResponseWriter, r *http.Request, u User) error {
	grants, err := s.cfg.Gate.Grants(r.Context(), u, wire.GrantsRequest{ConversationID: r.URL.Query().Get("conversationId")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, grants)
	return nil
}

func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request, u User) error {
	g, err := s.cfg.Gate.RevokeGrant(r.Context(), u, wire.RevokeGrantRequest{ID: r.PathValue("id")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, g)
	return nil
}

// grantPreview says what an approval with ?scope=task|session|always
// would grant: the tool and the pattern derived from the call.
func (s *Server) grantPreview(w http.ResponseWriter, r *http.Request, u User) error {
	p, err := s.cfg.Gate.GrantPreview(r.Context(), u, wire.GrantPreviewRequest{
		PendingID: r.PathValue("pendingId"), Scope: machine.Scope(r.URL.Query().Get("scope"))})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// RespondRequest is the reference design's decision body, at /v1/respond.
type RespondRequest struct {
	ConversationID string `json:"conversationId"`
	PendingID      string `json:"pendingId"`
	Approved       *bool  `json:"approved"`
	Reason         string `json:"reason,omitempty" max:"4096"`
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request, u User) error {
	var req RespondRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.PendingID == "" || req.ConversationID == "" {
		return fmt.Errorf("%w: conversationId and pendingId: required", machine.ErrInvalid)
	}
	e, err := s.cfg.Gate.Get(r.Context(), u, wire.GetRequest{PendingID: req.PendingID})
	if err != nil {
		return err
	}
	if e.ConversationID != req.ConversationID {
		return fmt.Errorf("pendingId %s in conversation %s: %w", req.PendingID, req.ConversationID, machine.ErrNotFound)
	}
	return s.decide(w, r, u, req.PendingID, DecisionRequest{Approved: req.Approved, Reason: req.Reason})
}

// CancelRequest is the optional body of a cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty" max:"4096"`
}

func (s *Server) cancelReason(w http.ResponseWriter, r *http.Request) (string, error) {
	if r.ContentLength == 0 {
		return "cancelled", nil
	}
	var c CancelRequest
	if err := readJSON(w, r, &c); err != nil {
		return "", err
	}
	return cmp.Or(c.Reason, "cancelled"), nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, u User) error {
	reason, err := s.cancelReason(w, r)
	if err != nil {
		return err
	}
	e, err := s.cfg.Gate.Cancel(r.Context(), u, wire.CancelRequest{PendingID: r.PathValue("pendingId"), Reason: reason})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

func (s *Server) cancelConversation(w http.ResponseWriter, r *http.Request, u User) error {
	reason, err := s.cancelReason(w, r)
	if err != nil {
		return err
	}
	reply, err := s.cfg.Gate.CancelConversation(r.Context(), u, wire.CancelRequest{ConversationID: r.PathValue("conversationId"), Reason: reason})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// RunReport is the body of a report on a call its caller runs (POST
// /v1/tool-calls/{pendingId}/started, heartbeat, succeeded, failed):
// wire.ReportRequest without the pending id (the path names it) or the
// holder (the credential names it). Each route takes only its own fields.
type RunReport struct {
	// LeaseMs (started, heartbeat) is how long the claim lasts without a
	// heartbeat: default an hour.
	LeaseMs int64 `json:"leaseMs,omitempty"`
	// Result (succeeded) is the tool's result, any JSON.
	Result json.RawMessage `json:"result,omitempty"`
	// Error (failed) is the tool's error.
	Error string `json:"error,omitempty" max:"65536"`
	// Cost (succeeded, failed) is what the run cost.
	Cost float64 `json:"cost,omitempty"`
}

// runReport reads the body of a report on the call the path names,
// refusing the fields the route does not take (each of "leaseMs",
// "result", "error", "cost" is one of those or not).
func runReport(w http.ResponseWriter, r *http.Request, takes ...string) (wire.ReportRequest, error) {
	var b RunReport
	if r.ContentLength != 0 {
		if err := readJSON(w, r, &b); err != nil {
			return wire.ReportRequest{}, err
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"leaseMs", b.LeaseMs != 0}, {"result", len(b.Result) > 0}, {"error", b.Error != ""}, {"cost", b.Cost != 0}} {
		if f.set && !slices.Contains(takes, f.name) {
			return wire.ReportRequest{}, fmt.Errorf("%w: %s: a report of %s takes only %s", machine.ErrInvalid, f.name, path.Base(r.URL.Path), strings.Join(takes, ", "))
		}
	}
	if b.LeaseMs < 0 {
		return wire.ReportRequest{}, fmt.Errorf("%w: leaseMs: want a positive number of milliseconds (or none: an hour), got %d", machine.ErrInvalid, b.LeaseMs)
	}
	if b.Cost < 0 {
		return wire.ReportRequest{}, fmt.Errorf("%w: cost: want zero or more, got %v", machine.ErrInvalid, b.Cost)
	}
	return wire.ReportRequest{PendingID: r.PathValue("pendingId"), LeaseMs: b.LeaseMs, Result: b.Result, Error: b.Error, Cost: b.Cost}, nil
}

// reportWith answers a report on a call with the use case that records it.
func (s *Server) reportWith(w http.ResponseWriter, r *http.Request, u User,
	record func(context.Context, gate.Actor, wire.ReportRequest) (*machine.Entry, error), takes ...string) error {
	req, err := runReport(w, r, takes...)
	if err != nil {
		return err
	}
	e, err := record(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// started claims a runnable call (approved, or scheduled and due) for the
// caller, who runs it: EXECUTING, under a lease.
func (s *Server) started(w http.ResponseWriter, r *http.Request, u User) error {
	return s.reportWith(w, r, u, s.cfg.Gate.ClaimAt, "leaseMs")
}

// heartbeat renews the caller's lease on a call it runs.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, u User) error {
	return s.reportWith(w, r, u, s.cfg.Gate.Heartbeat, "leaseMs")
}

// succeeded records that the call the caller claimed ran: its result and
// cost.
func (s *Server) succeeded(w http.ResponseWriter, r *http.Request, u User) error {
	return s.reportWith(w, r, u, s.cfg.Gate.Complete, "result", "cost")
}

// failed records that the call the caller claimed ran and failed: its
// error and cost.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, u User) error {
	return s.reportWith(w, r, u, s.cfg.Gate.Fail, "error", "cost")
}

// budgets serves the budget ledger; ?team=T narrows it to one team
// (?team= to the calls that name none).
func (s *Server) budgets(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.BudgetsRequest
	if q := r.URL.Query(); q.Has("team") {
		team := q.Get("team")
		req.Team = &team
	}
	reply, err := s.cfg.Gate.Budgets(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

func (s *Server) analytics(w http.ResponseWriter, r *http.Request, _ User) error {
	if s.cfg.Analytics == nil {
		return httpErr(http.StatusNotFound, "not_found", "analytics are not served by this process")
	}
	s.cfg.Analytics.ServeHTTP(w, r)
	return nil
}

// Me is who the caller is, for the inbox to show the right buttons.
type Me struct {
	ID    string `json:"id"`
	Roles []Role `json:"roles"`
	Open  bool   `json:"open"` // no tokens configured
}

func (s *Server) me(w http.ResponseWriter, _ *http.Request, u User) error {
	writeJSON(w, http.StatusOK, Me{ID: u.Name, Roles: u.Roles, Open: s.cfg.Tokens.Open()})
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

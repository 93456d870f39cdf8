package mcpgateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Gate is what the gateway needs of toolgate: the request API an agent's
// credential may use. *client.Client has it.
type Gate interface {
	client.Waiter // submit a call and wait for it (client.SubmitAndWaitWith)
	Started(ctx context.Context, pendingID, by string) (*machine.Entry, error)
	Heartbeat(ctx context.Context, pendingID, by string, lease time.Duration) (*machine.Entry, error)
	Succeed(ctx context.Context, pendingID, by string, result json.RawMessage, cost float64) (*machine.Entry, error)
	Fail(ctx context.Context, pendingID, by, errMsg string, cost float64) (*machine.Entry, error)
	DeniedTools(ctx context.Context, r wire.DeniedToolsRequest) (wire.DeniedToolsReply, error)
	List(ctx context.Context, r wire.ListRequest) ([]*machine.Entry, error)
	Recheck(ctx context.Context, pendingID string) (*wire.RecheckReply, error)
}

var _ Gate = (*client.Client)(nil)

// DefaultTimeout is how long MCP clients commonly wait for a request
// before giving up on it: the TypeScript SDK's default (Claude Desktop,
// Cursor and others use it) and Codex's tool_timeout_sec.
const DefaultTimeout = 60 * time.Second

// Options configure a Gateway.
type Options struct {
	// Team is the team of the calls, for the policy.
	Team string
	// Conversation, when set, is the conversation of every session's
	// calls; by default each MCP session is one (see Gateway).
	Conversation string
	// Timeout is how long the MCP client waits for a tools/call (its
	// request timeout; 0: DefaultTimeout). The gateway answers before it.
	Timeout time.Duration
	// Wait bounds how long a call waits for toolgate's verdict; past it
	// the call is withdrawn and answered as refused. It must leave
	// Timeout room to withdraw the call and answer (see WaitFor); 0 is
	// the most it allows.
	Wait time.Duration
	// Version is the gateway's, as it tells clients.
	Version string
	// Log receives what the gateway has to say (default: nothing).
	Log *slog.Logger
	// Stderr receives the upstream commands' standard error (default:
	// the gateway's own).
	Stderr io.Writer
	// UpstreamTimeout bounds starting and initializing one upstream
	// server (default 30s).
	UpstreamTimeout time.Duration
	// IdleTimeout ends an HTTP session that has had no request and no
	// open stream for that long (default DefaultIdleTimeout): its client
	// went away without ending it. A session whose client waits on a
	// call is not idle: the request is open.
	IdleTimeout time.Duration
	// Clock tells the time the idle timeout is measured on (default
	// time.Now).
	Clock func() time.Time
	// PollInterval is how often a task asks its client to poll
	// (pollIntervalMs; default DefaultPollInterval).
	PollInterval time.Duration
	// InboxURL, when set, is toolgate's inbox: a waiting task's status
	// message links its call's page there (<InboxURL>/#/calls/<pendingId>).
	InboxURL string
}

// DefaultIdleTimeout is how long an HTTP session may go without a request
// or an open stream before the gateway ends it.
const DefaultIdleTimeout = 10 * time.Minute

// Gateway is an MCP server in front of MCP servers: it forwards what a
// client asks of them, and every tools/call goes through toolgate first.
//
// Each MCP session is a toolgate conversation, named after the client's
// clientInfo.name and the session's id ("claude-ai-3F7K…"); the calls'
// caller is the name of the credential the gateway holds (an agent's), as
// everywhere in toolgate: a client's name is a label, not an identity.
// Each session has upstream connections of its own, opened when it
// initializes (so a stdio server runs once per session, as it would
// behind the client itself) and closed when it ends.
type Gateway struct {
	cfg        *Config
	gate       Gate
	opts       Options
	wait       time.Duration
	servers    []string // sorted
	namespaced bool
	log        *slog.Logger
	sdkLog     *slog.Logger // the SDK's own: warnings and errors only

	metrics *gauges

	// tasks speaks both forms of tasks; creating makes looking for a
	// call's twin and submitting it one step, so that two identical
	// calls at once get one task; outcomes keep what this process's runs
	// of tasks answered; offered, the tasks whose client answered the
	// offer of the decision page.
	tasks    taskProtocol
	creating keyedMutex
	outcomes outcomes
	offered  recentIDs

	mu       sync.Mutex
	sessions map[string]*session // by MCP session id: HTTP's
	// sessionlessByName serves HTTP's requests on 2026-07-28, by client
	// name (see sessionless).
	sessionlessByName map[string]*session
	// requests are the HTTP requests in flight that carry client
	// messages, by the token the handler gave them (requestHeader).
	requests sync.Map // string -> context.Context

	reaper   sync.Once
	stop     chan struct{}
	stopOnce sync.Once
}

// WaitFor returns how long a call waits for toolgate's verdict when the
// client waits timeout (0: DefaultTimeout): wait, or when wait is 0 the
// most timeout allows, which is timeout less 10 seconds (less half of it,
// under 20), the rule of toolgate's Claude Code hooks. A longer wait would
// have the client give up before the gateway withdrew the call: refused.
func WaitFor(wait, timeout time.Duration) (time.Duration, error) {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return client.WaitWithin(wait, timeout, "the client's", "the client gives up")
}

// New returns a gateway in front of cfg's servers, asking g about every
// tool call.
func New(cfg *Config, g Gate, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	wait, err := WaitFor(opts.Wait, opts.Timeout)
	if err != nil {
		return nil, err
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = 30 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	servers := cfg.names()
	return &Gateway{
		cfg: cfg, gate: g, opts: opts, wait: wait, servers: servers, namespaced: len(servers) > 1,
		log: log, sdkLog: slog.New(sdkHandler{log.Handler()}), sessions: map[string]*session{},
		sessionlessByName: map[string]*session{},
		metrics:           newGauges(), stop: make(chan struct{}), tasks: jsonrpcTasks{},
	}, nil
}

// Serve serves one MCP session over t (stdio: &mcp.StdioTransport{})
// until the client disconnects or ctx ends. Calls still waiting for a
// decision then are withdrawn.
func (gw *Gateway) Serve(ctx context.Context, t mcp.Transport) error {
	s := gw.newSession()
	s.conn = &connTransport{Transport: t}
	err := s.srv.Run(ctx, s.conn)
	s.close(errGatewayStopped)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// Handler serves MCP's streamable HTTP transport, one session per client
// that initializes, and the gateway's metrics at GET /metrics. A session
// the client ends (DELETE) withdraws its calls still waiting for a
// decision at once; a call whose request's connection drops is withdrawn
// too. A session idle for Options.IdleTimeout (no request, no open
// stream: its client went away without a DELETE) is ended: its waiting
// calls withdrawn, its upstream servers stopped.
func (gw *Gateway) Handler() http.Handler {
	gw.reaper.Do(func() { go gw.endIdleSessions() })
	// The event store gives each message on a stream an event id, and
	// replays to a client that reconnects with Last-Event-ID what it
	// missed (2025-11-25 and before; 2026-07-28 has no resumption).
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return gw.newSession().srv },
		&mcp.StreamableHTTPOptions{Logger: gw.sdkLog, EventStore: mcp.NewMemoryEventStore(nil)})
	// The SDK serves 2026-07-28, which has no HTTP sessions, only
	// statelessly: each request is a session of the SDK's, which the
	// gateway serves with the session of the client the request names.
	sessionless := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return r.Context().Value(sessionlessKey{}).(*session).srv
	}, &mcp.StreamableHTTPOptions{Logger: gw.sdkLog, Stateless: true})
	metrics := gw.metrics.handler()
	return http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && r.Method == http.MethodGet {
			metrics.ServeHTTP(w, r)
			return
		}
		gw.mu.Lock()
		s := gw.sessions[r.Header.Get("Mcp-Session-Id")]
		gw.mu.Unlock()
		h := h
		var body []byte
		if r.Method == http.MethodPost {
			var err error
			if body, err = io.ReadAll(io.LimitReader(r.Body, maxBody)); err != nil {
				http.Error(w, "Bad Request: the request's body could not be read", http.StatusBadRequest)
				return
			}
			// A body longer than read goes on to the SDK, which refuses it.
			body = liftTask(body)
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Protocol-Version") >= protocolSessionless {
			s = gw.sessionless(body)
			if s == nil {
				http.Error(w, "Bad Request: the request's body is not JSON-RPC", http.StatusBadRequest)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), sessionlessKey{}, s))
			h = sessionless
		}
		if s != nil {
			defer s.begin()()
			if r.Method == http.MethodDelete {
				// The SDK closes a session only once its requests are
				// answered: withdraw the waiting ones first.
				s.cancelCalls(errClientEnded)
			}
		}
		r.Header.Del(requestHeader) // the gateway's own, never a client's
		if r.Method == http.MethodPost {
			token := randomHex(12)
			r.Header.Set(requestHeader, token)
			gw.requests.Store(token, r.Context())
			defer gw.requests.Delete(token)
		}
		h.ServeHTTP(w, r)
	}))
}

// protocolSessionless is the first protocol revision without sessions:
// over streamable HTTP each request says who its client is, in its _meta.
const protocolSessionless = "2026-07-28"

type sessionlessKey struct{}

// sessionless is the session that serves an HTTP request whose body is
// body on a revision without sessions: one per client name (the
// clientInfo in the request's _meta), whose upstream connections its
// requests share, ended when it is idle as any HTTP session; nil when the
// body is not JSON.
func (gw *Gateway) sessionless(body []byte) *session {
	var msg struct {
		Params struct {
			Meta struct {
				ClientInfo struct {
					Name string `json:"name"`
				} `json:"io.modelcontextprotocol/clientInfo"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return nil
	}
	name := msg.Params.Meta.ClientInfo.Name
	gw.mu.Lock()
	defer gw.mu.Unlock()
	s := gw.sessionlessByName[name]
	if s == nil || s.isClosed() {
		s = gw.newSession()
		s.sessionless = true
		gw.sessionlessByName[name] = s
	}
	return s
}

// maxBody bounds the body the gateway reads of a request, to learn its
// client (on a revision without sessions) and the task a tools/call asks
// for (liftTask): the SDK's default.
const maxBody = 10 << 20

// requestHeader names, on an HTTP request the gateway serves, the token
// under which the handler keeps its context: a tools/call learns from it
// when the client's connection drops.
const requestHeader = "Toolgate-Gateway-Request"

// requestContext is the context of the HTTP request that carried req, if
// it came over HTTP: it ends when the request does, or its connection
// drops.
func (gw *Gateway) requestContext(req *mcp.CallToolRequest) context.Context {
	if req.Extra == nil || req.Extra.Header == nil {
		return nil
	}
	v, ok := gw.requests.Load(req.Extra.Header.Get(requestHeader))
	if !ok {
		return nil
	}
	return v.(context.Context)
}

// endIdleSessions ends the HTTP sessions idle for the idle timeout, until
// the gateway closes. It looks often enough that a session ends within a
// tenth of the timeout (and a second) after it.
func (gw *Gateway) endIdleSessions() {
	t := time.NewTicker(min(max(gw.opts.IdleTimeout/10, 10*time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-gw.stop:
			return
		case <-t.C:
		}
		now := gw.opts.Clock()
		var idle []*session
		for _, s := range gw.all() {
			if s.idleSince(now) >= gw.opts.IdleTimeout {
				idle = append(idle, s)
			}
		}
		for _, s := range idle {
			gw.log.Info("ending an idle MCP session: its client went away", "conversation", s.conversation, "idle", gw.opts.IdleTimeout)
			go s.end(errClientGone)
		}
	}
}

// Close ends every HTTP session: their calls still waiting for a decision
// are withdrawn, and their upstream servers stopped.
func (gw *Gateway) Close() {
	gw.stopOnce.Do(func() { close(gw.stop) })
	var wg sync.WaitGroup
	for _, s := range gw.all() {
		wg.Go(func() { s.close(errGatewayStopped) })
	}
	wg.Wait()
}

// all is every HTTP session.
func (gw *Gateway) all() []*session {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return append(slices.Collect(maps.Values(gw.sessions)), slices.Collect(maps.Values(gw.sessionlessByName))...)
}

// errGatewayStopped is why calls stop when the gateway does.
var errGatewayStopped = errors.New("the gateway stopped")

// errClientEnded is why a session's calls stop when its client ends it.
var errClientEnded = errors.New("the MCP client ended its session")

// errClientGone is why a session's calls stop when it ends idle.
var errClientGone = errors.New("the MCP client went away")

// errClientDisconnected is why a call stops when the connection of the
// request that carried it drops, or the stdio client's stream ends.
var errClientDisconnected = errors.New("the MCP client disconnected")

// supportedVersions are the protocol versions the gateway speaks to its
// clients: the SDK's. A 2026-07-28 client has no initialize: its first
// request, which carries its capabilities and name in _meta, opens the
// session (over stdio: the connection is the session; over HTTP, the
// client's name: see sessionless). Toward each upstream server the SDK's
// client negotiates its own.
var supportedVersions = mcp.SupportedProtocolVersions()

// session is one client's MCP session and its upstream connections.
type session struct {
	gw  *Gateway
	srv *mcp.Server

	once         sync.Once
	ss           *mcp.ServerSession
	id           string
	conversation string
	clientCaps   *mcp.ClientCapabilities
	initialized  bool // by initialize: the client is on a revision before 2026-07-28
	// protocol is the revision the client asked for in initialize: the
	// one the session speaks, when the SDK has it (it has 2025-11-25,
	// whose own tasks the session then serves).
	protocol string
	// sessionless: HTTP on 2026-07-28, where each request is a session
	// of the SDK's (ss is the first's), and this one ends idle.
	sessionless bool
	ups         map[string]*upstream
	// conn carries the session's messages, where the gateway serves the
	// transport itself (stdio): notifications/tasks go on it.
	conn *connTransport
	// life ends when the session does: the work of its tasks (watching
	// a call, running it) stops then; the tasks live on in toolgate.
	life    context.Context
	endLife context.CancelFunc

	mu       sync.Mutex
	calls    map[*callCtx]struct{}
	inflight []*inflight     // the client's requests being answered (related.go)
	watching map[string]bool // the tasks' calls watched, by pendingId
	closed   bool
	// HTTP: the client's requests (and streams) open now, and when the
	// last one ended or the session began.
	open     int
	lastOpen time.Time
	counted  bool // in the sessions gauge
}

// callCtx is a tools/call in flight, to stop when the session ends.
type callCtx struct{ cancel context.CancelCauseFunc }

func (gw *Gateway) newSession() *session {
	s := &session{gw: gw, calls: map[*callCtx]struct{}{}, watching: map[string]bool{}, ups: map[string]*upstream{}}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "toolgate-mcp-gateway", Title: "toolgate MCP gateway", Version: gw.opts.Version},
		&mcp.ServerOptions{Logger: gw.sdkLog, SupportedProtocolVersions: supportedVersions,
			SubscribeHandler: s.subscribe, UnsubscribeHandler: s.unsubscribe,
			// What the SDK's server may pass on: the lists' changes, and
			// subscriptions (on 2026-07-28, subscriptions/listen agrees to
			// no more). The client is told what the servers can do.
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true},
				Prompts:   &mcp.PromptCapabilities{ListChanged: true},
				Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
				Logging:   &mcp.LoggingCapabilities{}}})
	s.srv.AddReceivingMiddleware(s.middleware)
	s.srv.AddSendingMiddleware(passSchema)
	if err := gw.tasks.install(s.srv, s); err != nil {
		panic(err) // the extension's methods shadow none of MCP's: a bug
	}
	for _, name := range gw.servers {
		s.ups[name] = &upstream{name: name, cfg: gw.cfg.Servers[name], s: s}
	}
	return s
}

// middleware answers the methods the gateway forwards, before the SDK's
// server (which has no features of its own) would.
func (s *session) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := s.handle(ctx, method, req, next)
		return res, internalError(err)
	}
}

// internalError is err as a JSON-RPC error: its own when it is one (an
// upstream server's, or the gateway's invalid params), else an internal
// error (-32603) saying what failed: an upstream server that could not be
// started or reached, or that broke.
func internalError(err error) error {
	var rpcErr *jsonrpc.Error
	if err == nil || errors.As(err, &rpcErr) {
		return err
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// handle answers the methods the gateway forwards.
func (s *session) handle(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	if method != "initialize" {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		defer s.relate(ctx, ss, "", progressToken(req))()
		// A 2026-07-28 client sends no initialize: the SDK takes its
		// first request's _meta for it.
		if ss != nil {
			if ip := ss.InitializeParams(); ip != nil && s.setup(ss, ip, false) {
				s.connectAll(ctx)
			}
		}
	}
	switch method {
	case "initialize":
		return s.initialize(ctx, method, req, next)
	case "server/discover":
		res, err := next(ctx, method, req)
		if dr, ok := res.(*mcp.DiscoverResult); ok && err == nil {
			// The SDK has taken the request's _meta for the session's
			// parameters now.
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss.InitializeParams() != nil && s.setup(ss, ss.InitializeParams(), false) {
				s.connectAll(ctx)
			}
			dr.Capabilities, dr.Instructions = s.capabilities()
		}
		return res, err
	case "tools/list":
		res, err := s.listTools(ctx)
		if err == nil && s.form(nil) == formCore {
			return coreListTools(res), nil
		}
		return res, err
	case "tools/call":
		return s.callTool(ctx, req.(*mcp.CallToolRequest))
	case "resources/list":
		return s.listResources(ctx)
	case "resources/templates/list":
		return s.listResourceTemplates(ctx)
	case "resources/read":
		return s.readResource(ctx, req.GetParams().(*mcp.ReadResourceParams))
	case "prompts/list":
		return s.listPrompts(ctx)
	case "prompts/get":
		return s.getPrompt(ctx, req.GetParams().(*mcp.GetPromptParams))
	case "completion/complete":
		return s.complete(ctx, req.GetParams().(*mcp.CompleteParams))
	case "logging/setLevel":
		res, err := next(ctx, method, req)
		if err == nil {
			s.setLevel(ctx, req.GetParams().(*mcp.SetLoggingLevelParams))
		}
		return res, err
	}
	return next(ctx, method, req)
}

// initialize opens the session's upstream connections, mirroring what the
// client can do (sampling, elicitation) toward them, and answers with
// what they can do together.
func (s *session) initialize(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	params, _ := req.GetParams().(*mcp.InitializeParams)
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if s.setup(ss, params, true) {
		s.connectAll(ctx)
	}
	res, err := next(ctx, method, req)
	if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
		ir.Capabilities, ir.Instructions = s.capabilities()
		// The SDK sends no log message until the client sets a level;
		// the servers' messages are passed on as they send them, each
		// server filtering at the level the client sets it to.
		_, _ = next(ctx, "logging/setLevel", &mcp.ServerRequest[*mcp.SetLoggingLevelParams]{Session: ss, Params: &mcp.SetLoggingLevelParams{Level: "debug"}})
		if s.form(nil) == formCore {
			return coreInitialize(ir), nil
		}
	}
	return res, err
}

// setup opens the session, once, for the client params describe: its
// name, for the conversation; what it can do (sampling, elicitation, the
// tasks extension). It reports whether this call did: the caller then
// connects the upstream servers. initialized says the client opened the
// session with initialize (a revision before 2026-07-28), whose
// connection is then where it listens for notifications.
func (s *session) setup(ss *mcp.ServerSession, params *mcp.InitializeParams, initialized bool) bool {
	first := false
	s.once.Do(func() {
		first = true
		s.initialized = initialized
		s.ss = ss
		s.id = ss.ID()
		if s.id == "" { // stdio: no transport session id
			s.id = randomHex(8)
		}
		client := "mcp"
		if params != nil {
			s.clientCaps = params.Capabilities
			if initialized {
				s.protocol = params.ProtocolVersion
			}
			if params.ClientInfo != nil && params.ClientInfo.Name != "" {
				client = params.ClientInfo.Name
			}
		}
		s.conversation = s.gw.opts.Conversation
		if s.conversation == "" {
			s.conversation = labelToken(client, 64) + "-" + s.id
		}
		s.mu.Lock()
		s.lastOpen = s.gw.opts.Clock()
		if !s.closed {
			s.counted = true
			s.gw.metrics.sessions.Inc()
		}
		s.mu.Unlock()
		if s.sessionless {
			return // ends idle, not with its first request
		}
		if ss.ID() != "" {
			s.gw.mu.Lock()
			s.gw.sessions[ss.ID()] = s
			s.gw.mu.Unlock()
		}
		go func() {
			_ = ss.Wait()
			s.close(errClientDisconnected)
		}()
	})
	return first
}

// capabilities are what the upstream servers can do together, and their
// instructions. Tools are always offered; list changes are passed on, and
// resource subscriptions where a server offers them.
func (s *session) capabilities() (*mcp.ServerCapabilities, string) {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true},
		Extensions: map[string]any{TasksExtension: map[string]any{}}}
	var instructions []string
	for _, name := range s.gw.servers {
		cs := s.ups[name].current()
		if cs == nil || cs.InitializeResult() == nil {
			continue
		}
		ir := cs.InitializeResult()
		if c := ir.Capabilities; c != nil {
			if c.Resources != nil {
				if caps.Resources == nil {
					caps.Resources = &mcp.ResourceCapabilities{ListChanged: true}
				}
				caps.Resources.Subscribe = caps.Resources.Subscribe || c.Resources.Subscribe
			}
			if c.Prompts != nil {
				caps.Prompts = &mcp.PromptCapabilities{ListChanged: true}
			}
			if c.Completions != nil {
				caps.Completions = &mcp.CompletionCapabilities{}
			}
			if c.Logging != nil {
				caps.Logging = &mcp.LoggingCapabilities{}
			}
		}
		if ir.Instructions != "" {
			if s.gw.namespaced {
				instructions = append(instructions, fmt.Sprintf("%s (tools and prompts named %s%s…): %s", name, name, Separator, ir.Instructions))
			} else {
				instructions = append(instructions, ir.Instructions)
			}
		}
	}
	return caps, strings.Join(instructions, "\n\n")
}

// track registers a call in flight; the returned func forgets it. A
// session already closed stops the call at once.
func (s *session) track(cancel context.CancelCauseFunc) func() {
	c := &callCtx{cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel(errors.New("the MCP session has ended"))
		return func() {}
	}
	s.calls[c] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.calls, c)
		s.mu.Unlock()
	}
}

// begin counts an HTTP request of the session's client as open until the
// returned func.
func (s *session) begin() func() {
	s.mu.Lock()
	s.open++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.open--
		s.lastOpen = s.gw.opts.Clock()
		s.mu.Unlock()
	}
}

// idleSince is how long the session has had no request open, at now.
func (s *session) idleSince(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open > 0 || s.lastOpen.IsZero() {
		return 0
	}
	return now.Sub(s.lastOpen)
}

func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// end closes the session for cause, and the SDK's session with it.
func (s *session) end(cause error) {
	s.close(cause)
	if s.ss != nil {
		_ = s.ss.Close()
	}
}

// cancelCalls stops every call in flight, with cause as the reason.
func (s *session) cancelCalls(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.calls {
		c.cancel(cause)
	}
}

// close ends the session: its calls in flight are withdrawn, and its
// upstream connections closed (a stdio server is told to exit).
func (s *session) close(cause error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.endLife()
	if s.counted {
		s.counted = false
		s.gw.metrics.sessions.Dec()
	}
	s.mu.Unlock()
	s.cancelCalls(cause)
	s.gw.mu.Lock()
	if s.ss != nil && s.gw.sessions[s.ss.ID()] == s {
		delete(s.gw.sessions, s.ss.ID())
	}
	maps.DeleteFunc(s.gw.sessionlessByName, func(_ string, x *session) bool { return x == s })
	s.gw.mu.Unlock()
	var wg sync.WaitGroup
	for _, u := range s.ups {
		wg.Go(u.close)
	}
	wg.Wait()
}

// notifyListChanged tells the client that a list (tools, prompts,
// resources) changed upstream. The SDK's server sends a list_changed
// notification when its own features change, and has no other way to:
// so a placeholder is added and removed at once (its debounce sends one
// notification). The placeholder is never listed: the gateway answers
// the lists itself.
func (s *session) notifyListChanged(kind string) {
	const placeholder = "toolgate-mcp-gateway-list-changed"
	switch kind {
	case "tools":
		s.srv.AddTool(&mcp.Tool{Name: placeholder, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, errors.New("placeholder")
			})
		s.srv.RemoveTools(placeholder)
	case "prompts":
		s.srv.AddPrompt(&mcp.Prompt{Name: placeholder},
			func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return nil, errors.New("placeholder")
			})
		s.srv.RemovePrompts(placeholder)
	case "resources":
		uri := "toolgate:" + placeholder
		s.srv.AddResource(&mcp.Resource{URI: uri, Name: placeholder},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return nil, errors.New("placeholder")
			})
		s.srv.RemoveResources(uri)
	}
}

// labelToken makes s a conversation id's label: letters, digits, '-' and
// '_' only, at most n bytes.
func labelToken(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "mcp"
	}
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sdkHandler passes on the SDK's warnings and errors, but for one that
// every HTTP session makes: a list_changed notification that finds no
// stream to go on (the client has not opened its GET stream, which it
// need not), which is logged at debug level.
type sdkHandler struct{ h slog.Handler }

func (m sdkHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && m.h.Enabled(ctx, l)
}

func (m sdkHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && unsent(r.Message) {
		if !m.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return m.h.Handle(ctx, r)
}

func (m sdkHandler) WithAttrs(as []slog.Attr) slog.Handler { return sdkHandler{m.h.WithAttrs(as)} }
func (m sdkHandler) WithGroup(name string) slog.Handler    { return sdkHandler{m.h.WithGroup(name)} }

// unsent reports whether msg is the SDK saying a list_changed
// notification found no stream to go on.
func unsent(msg string) bool {
	return strings.HasPrefix(msg, "calling notifications/") && strings.Contains(msg, "list_changed") && strings.Contains(msg, "not connected")
}

package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upstream is one session's connection to one configured server. It is
// opened when the session initializes and opened again on next use after
// it broke (a stdio server that exited is started again).
type upstream struct {
	name string
	cfg  Upstream
	s    *session

	mu     sync.Mutex
	cs     *mcp.ClientSession
	tools  map[string]bool // the names the server listed last; nil: not listed since connecting
	closed bool
}

// errSessionEnded refuses a connection for a session that has ended.
var errSessionEnded = errors.New("the MCP session has ended")

// current is the open connection, or nil.
func (u *upstream) current() *mcp.ClientSession {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cs
}

// session returns the open connection, opening one if there is none.
func (u *upstream) session(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cs != nil {
		return u.cs, nil
	}
	if u.closed {
		return nil, errSessionEnded
	}
	// A connection outlives the request that needed it, and takes nothing
	// of it: the SDK reads the client's protocol revision from the
	// context it connects with, which the client's request carries.
	cctx, cancel := context.WithTimeout(context.Background(), u.s.gw.opts.UpstreamTimeout)
	defer cancel()
	cs, err := u.client().Connect(cctx, u.transport(), nil)
	if err != nil {
		return nil, fmt.Errorf("MCP server %s: %w", u.name, err)
	}
	u.cs, u.tools = cs, nil
	u.s.gw.log.Info("upstream connected", "server", u.name, "conversation", u.s.conversation)
	process := u.cfg.Transport == nil && len(u.cfg.Command) > 0
	if process {
		u.s.gw.metrics.upstreams.Inc()
	}
	go func() {
		err := cs.Wait()
		if process {
			_ = cs.Close() // waits for the process to exit
			u.s.gw.metrics.upstreams.Dec()
		}
		u.mu.Lock()
		if u.cs == cs {
			u.cs, u.tools = nil, nil
		}
		closed := u.closed
		u.mu.Unlock()
		if !closed {
			u.s.gw.log.Warn("upstream connection ended; the next request opens another", "server", u.name, "err", err)
		}
	}()
	return cs, nil
}

// close closes the connection for good.
func (u *upstream) close() {
	u.mu.Lock()
	cs := u.cs
	u.cs, u.closed = nil, true
	u.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// transport connects to the server as configured.
func (u *upstream) transport() mcp.Transport {
	switch cfg := u.cfg; {
	case cfg.Transport != nil:
		return cfg.Transport()
	case len(cfg.Command) > 0:
		argv := cfg.argv()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = os.Environ()
		for k, v := range cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+expand(v))
		}
		cmd.Dir = cfg.Dir
		cmd.Stderr = u.s.gw.opts.Stderr
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	default:
		header := http.Header{}
		for k, v := range cfg.Headers {
			header.Set(k, expand(v))
		}
		return &mcp.StreamableClientTransport{Endpoint: cfg.URL,
			HTTPClient: &http.Client{Transport: headerTransport{header: header, next: http.DefaultTransport}}}
	}
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	header http.Header
	next   http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.header) > 0 {
		r = r.Clone(r.Context())
		for k, vs := range t.header {
			r.Header[k] = vs
		}
	}
	return t.next.RoundTrip(r)
}

// client is the MCP client the gateway is toward the server: what the
// server asks of the client (sampling, elicitation) is passed to the
// gateway's own client when it can answer, and what it tells (list
// changes, log messages, progress) is passed on.
func (u *upstream) client() *mcp.Client {
	s := u.s
	opts := &mcp.ClientOptions{
		Logger: s.gw.sdkLog,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			u.mu.Lock()
			u.tools = nil
			u.mu.Unlock()
			s.notifyListChanged("tools")
		},
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { s.notifyListChanged("prompts") },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { s.notifyListChanged("resources") },
		ResourceUpdatedHandler: func(ctx context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			_ = s.srv.ResourceUpdated(ctx, r.Params) // to the client, when it subscribed
		},
		LoggingMessageHandler: func(ctx context.Context, r *mcp.LoggingMessageRequest) {
			p := *r.Params
			if p.Logger == "" {
				p.Logger = u.name
			}
			ctx, ss, done := s.related(ctx, u.name, nil)
			defer done()
			_ = ss.Log(ctx, &p)
		},
		ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
			ctx, ss, done := s.related(ctx, u.name, r.Params.ProgressToken)
			defer done()
			_ = ss.NotifyProgress(ctx, r.Params)
		},
	}
	if caps := s.clientCaps; caps != nil {
		if caps.Sampling != nil {
			opts.CreateMessageHandler = func(ctx context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				ctx, ss, done := s.related(ctx, u.name, nil)
				defer done()
				return ss.CreateMessage(ctx, r.Params)
			}
		}
		if caps.Elicitation != nil {
			// Declares the capability; elicitation/create is answered by
			// the middleware below, before the SDK checks the answer.
			opts.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return nil, errors.New("unreachable")
			}
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "toolgate-mcp-gateway", Version: s.gw.opts.Version}, opts)
	if opts.ElicitationHandler != nil {
		c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				p, ok := req.GetParams().(*mcp.ElicitParams)
				if method != "elicitation/create" || !ok || p == nil {
					return next(ctx, method, req)
				}
				ctx, ss, done := s.related(ctx, u.name, nil)
				defer done()
				return elicit(ctx, ss, p)
			}
		})
	}
	return c
}

// listTools lists every tool of the server, following its pages, and
// remembers their names.
func (u *upstream) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := u.session(ctx)
	if err != nil {
		return nil, err
	}
	var tools []*mcp.Tool
	names := map[string]bool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("MCP server %s: tools/list: %w", u.name, err)
		}
		tools = append(tools, t)
		names[t.Name] = true
	}
	u.mu.Lock()
	if u.cs == cs {
		u.tools = names
	}
	u.mu.Unlock()
	return tools, nil
}

// hasTool reports whether the server has a tool named name, listing its
// tools again when the last list did not name it.
func (u *upstream) hasTool(ctx context.Context, name string) (bool, error) {
	u.mu.Lock()
	known := u.tools[name] && u.cs != nil
	u.mu.Unlock()
	if known {
		return true, nil
	}
	if _, err := u.listTools(ctx); err != nil {
		return false, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tools[name], nil
}

// has reports whether the open connection's server offers a capability.
func (u *upstream) has(ctx context.Context, capability func(*mcp.ServerCapabilities) bool) (*mcp.ClientSession, bool, error) {
	cs, err := u.session(ctx)
	if err != nil {
		return nil, false, err
	}
	ir := cs.InitializeResult()
	return cs, ir != nil && ir.Capabilities != nil && capability(ir.Capabilities), nil
}

// connectAll opens every upstream connection at once; a server that
// cannot be reached is logged, and tried again on next use.
func (s *session) connectAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range s.ups {
		wg.Go(func() {
			if _, err := u.session(ctx); err != nil {
				s.gw.log.Error("upstream unavailable", "server", u.name, "err", err)
			}
		})
	}
	wg.Wait()
}

package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// claudeCodeHookPath is the route of Claude Code's HTTP hooks.
const claudeCodeHookPath = "/v1/integrations/claude-code/{hook}"

// claudeCodeHooks maps the hook paths to the events they take.
var claudeCodeHooks = map[string][]string{
	"pre-tool-use":       {claudecode.EventPreToolUse},
	"permission-request": {claudecode.EventPermissionRequest},
	"post-tool-use":      {claudecode.EventPostToolUse, claudecode.EventPostToolUseFailure},
	"permission-denied":  {claudecode.EventPermissionDenied},
}

// errHookClientGone is why a call is withdrawn when Claude Code closes an
// HTTP hook's connection: it stopped waiting (its hook timeout, or the
// session ended).
var errHookClientGone = errors.New("the HTTP hook's client closed the connection")

// claudeCodeHook answers one of Claude Code's HTTP hooks, with the same
// JSON its command hook prints. The calls are the agent's: the token's
// user is their callerBotId; ?team= names their team. ?timeout= is the
// hook's timeout in Claude Code's settings (seconds; default 30, Claude
// Code's for HTTP hooks) and ?wait= how long to wait for a verdict within
// it (default: the most the timeout allows), as the command hook's
// --timeout and --wait; ?headless=true, as its --headless, defers a
// non-interactive session's calls that wait for a human.
//
// Claude Code takes an answer other than a 2xx as a non-blocking error and
// runs the call, so every answer here is a 200: a request toolgate will not
// take (a bad input, query or path; and, refused before this, no valid
// token) is answered with refuseClaudeCodeHook's deny.
func (s *Server) claudeCodeHook(w http.ResponseWriter, r *http.Request, u User) error {
	asked := time.Now()
	hook := r.PathValue("hook")
	event := pathEvent(hook)
	var raw json.RawMessage
	if err := readJSON(w, r, &raw); err != nil {
		return &hookError{event: event, err: err}
	}
	event = cmp.Or(claudecode.EventOf(raw), event)
	events, ok := claudeCodeHooks[hook]
	if !ok {
		return &hookError{event: event, err: httpErr(http.StatusNotFound, "not_found",
			fmt.Sprintf("no such Claude Code hook here: %s: the hooks are pre-tool-use, permission-request, post-tool-use and permission-denied", r.URL.Path))}
	}
	opts := claudecode.Options{Caller: u.Name, Team: r.URL.Query().Get("team"), Timeout: claudecode.DefaultHTTPTimeout, Asked: asked}
	for name, d := range map[string]*time.Duration{"timeout": &opts.Timeout, "wait": &opts.Wait} {
		if v := r.URL.Query().Get(name); v != "" {
			parsed, err := claudecode.ParseDuration(v)
			if err != nil {
				return &hookError{event: event, err: fmt.Errorf("%w (?%s=)", err, name)}
			}
			*d = parsed
		}
	}
	if v := r.URL.Query().Get("headless"); v != "" {
		headless, err := strconv.ParseBool(v)
		if err != nil {
			return &hookError{event: event, err: fmt.Errorf("%w: ?headless=: want true or false, got %q", machine.ErrInvalid, v)}
		}
		opts.Headless = headless
	}
	if _, err := claudecode.WaitFor(opts.Wait, opts.Timeout); err != nil {
		return &hookError{event: event, err: fmt.Errorf("%w (?wait=, ?timeout=)", err)}
	}
	in, err := claudecode.ParseInput(raw)
	if err != nil {
		return &hookError{event: event, err: err}
	}
	if !slices.Contains(events, in.HookEventName) {
		return &hookError{event: event, err: fmt.Errorf("%w: hook_event_name: %q does not belong at %s", machine.ErrInvalid, in.HookEventName, r.URL.Path)}
	}
	// The hook waits for a human's decision, within its wait: the
	// server's write timeout is for other requests.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	// The request's context ends when Claude Code closes the connection:
	// say so, as the reason the call is withdrawn.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	stop := context.AfterFunc(r.Context(), func() { cancel(errHookClientGone) })
	defer stop()
	out, err := claudecode.Handle(ctx, hookGate{g: s.cfg.Gate, a: u, await: s.cfg.Await}, in, opts)
	if err != nil {
		// Only a PostToolUse fails so, after the tool ran: say so.
		if status, _ := wire.ErrorStatus(err); status == http.StatusInternalServerError && s.cfg.Log != nil {
			s.cfg.Log.Error("Claude Code hook failed", "hook", hook, "err", err)
		}
		out = claudecode.Failed(in, opts, err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// pathEvent is the event a hook's path takes first, "" for a path that is
// no hook's.
func pathEvent(hook string) string {
	if events := claudeCodeHooks[hook]; len(events) > 0 {
		return events[0]
	}
	return ""
}

// hookError is why a hook's request is refused, with the event whose
// answer's shape Claude Code expects.
type hookError struct {
	event string
	err   error
}

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// hookCredentialFix says how to give an HTTP hook its credential.
const hookCredentialFix = `Claude Code puts $TOOLGATE_TOKEN (or the variable the hook names) in the hook's "Authorization: Bearer" header ` +
	`only when the hook lists it in "allowedEnvVars": add "allowedEnvVars": ["TOOLGATE_TOKEN"] to the hook in Claude Code's settings ` +
	`and set the variable to a toolgate token with the agent role (docs/claude-code.md, HTTP hooks)`

// refuseClaudeCodeHook answers a hook's request that toolgate will not
// take, err saying why, with a 200 in the hook's own shape: a deny at
// PreToolUse and PermissionRequest (the event named by the request's
// hook_event_name, else by its path), which Claude Code obeys; elsewhere a
// systemMessage. A request without a valid token is refused so too, before
// anything is submitted or recorded, saying how to give the hook its
// token. Any other status would have Claude Code run the call ungated.
func (s *Server) refuseClaudeCodeHook(w http.ResponseWriter, r *http.Request, err error) {
	var he *hookError
	event := ""
	if errors.As(err, &he) {
		event = he.event
	} else {
		// Refused before the handler read the body: read the event's name
		// from it, as far as the API reads any body.
		data, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		event = cmp.Or(claudecode.EventOf(data), pathEvent(r.PathValue("hook")))
	}
	w.Header().Del("WWW-Authenticate")
	writeJSON(w, http.StatusOK, claudecode.Refuse(event, s.hookRefusal(r, err)))
}

// hookRefusal is the reason a hook's request is refused, for Claude Code
// and its user.
func (s *Server) hookRefusal(r *http.Request, err error) string {
	var he *httpError
	status := http.StatusInternalServerError
	if errors.As(err, &he) {
		status = he.status
	} else {
		status, _ = wire.ErrorStatus(err)
	}
	switch {
	case status == http.StatusUnauthorized:
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer")
		if strings.TrimSpace(token) == "" {
			return "toolgate refused this hook's request: it sent no bearer token. " + hookCredentialFix
		}
		return "toolgate refused this hook's request: its bearer token is not one toolgate knows (mistyped, or revoked). " + hookCredentialFix
	case status == http.StatusInternalServerError:
		if s.cfg.Log != nil {
			s.cfg.Log.Error("Claude Code hook failed", "err", err)
		}
		return "toolgate failed to answer this hook (an internal error; toolgate's log says why)"
	default:
		return "toolgate refused this hook's request: " + err.Error()
	}
}

// hookGate is what Claude Code's HTTP hooks need of toolgate, answered by
// the application layer in this process: no request to itself over NATS.
type hookGate struct {
	g     *gate.Service
	a     gate.Actor // the agent whose hook this is
	await AwaitFunc
}

var _ claudecode.Gate = hookGate{}

func (h hookGate) Submit(ctx context.Context, call machine.Call) (*machine.Entry, error) {
	return h.g.Submit(ctx, h.a, call)
}

func (h hookGate) Await(ctx context.Context, pendingID string, opts ...client.AwaitOption) (client.Outcome, error) {
	read := func(ctx context.Context, pendingID string) (*machine.Entry, uint64, error) {
		return h.g.Read(ctx, h.a, wire.GetRequest{PendingID: pendingID})
	}
	return h.await(ctx, read, pendingID, opts...)
}

func (h hookGate) Get(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return h.g.Get(ctx, h.a, wire.GetRequest{PendingID: pendingID})
}

func (h hookGate) Cancel(ctx context.Context, pendingID, by, reason string) (*machine.Entry, error) {
	return h.g.Cancel(ctx, h.a, wire.CancelRequest{PendingID: pendingID, By: by, Reason: reason})
}

// Started claims the call for Claude Code, which runs it itself, for the
// lease the request API's started gives an agent that names none: an hour.
func (h hookGate) Started(ctx context.Context, pendingID, by string) (*machine.Entry, error) {
	return h.g.ClaimAt(ctx, h.a, wire.ReportRequest{PendingID: pendingID, By: by})
}

func (h hookGate) Succeed(ctx context.Context, pendingID, by string, result json.RawMessage, cost float64) (*machine.Entry, error) {
	return h.g.Complete(ctx, h.a, wire.ReportRequest{PendingID: pendingID, By: by, Result: result, Cost: cost})
}

func (h hookGate) Fail(ctx context.Context, pendingID, by, errMsg string, cost float64) (*machine.Entry, error) {
	return h.g.Fail(ctx, h.a, wire.ReportRequest{PendingID: pendingID, By: by, Error: errMsg, Cost: cost})
}

// Calls reads every page of the conversation's calls of the tool.
func (h hookGate) Calls(ctx context.Context, conversationID, toolName string) ([]*machine.Entry, error) {
	var all []*machine.Entry
	r := wire.ListRequest{ConversationID: conversationID, ToolName: toolName}
	for {
		page, err := h.g.List(ctx, h.a, r)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all, nil
		}
		r.Cursor = page.NextCursor
	}
}

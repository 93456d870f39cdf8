package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/claudecode"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// claudeCodeHooks maps the hook paths to the events they take.
var claudeCodeHooks = map[string][]string{
	"pre-tool-use":       {claudecode.EventPreToolUse},
	"permission-request": {claudecode.EventPermissionRequest},
	"post-tool-use":      {claudecode.EventPostToolUse, claudecode.EventPostToolUseFailure},
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
// --timeout and --wait.
func (s *Server) claudeCodeHook(w http.ResponseWriter, r *http.Request, u User) error {
	asked := time.Now()
	events, ok := claudeCodeHooks[r.PathValue("hook")]
	if !ok {
		return httpErr(http.StatusNotFound, "not_found", "no such Claude Code hook here: pre-tool-use, permission-request or post-tool-use")
	}
	opts := claudecode.Options{Caller: u.Name, Team: r.URL.Query().Get("team"), Timeout: claudecode.DefaultHTTPTimeout, Asked: asked}
	for name, d := range map[string]*time.Duration{"timeout": &opts.Timeout, "wait": &opts.Wait} {
		if v := r.URL.Query().Get(name); v != "" {
			parsed, err := claudecode.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w (?%s=)", err, name)
			}
			*d = parsed
		}
	}
	if _, err := claudecode.WaitFor(opts.Wait, opts.Timeout); err != nil {
		return fmt.Errorf("%w (?wait=, ?timeout=)", err)
	}
	var raw json.RawMessage
	if err := readJSON(w, r, &raw); err != nil {
		return err
	}
	in, err := claudecode.ParseInput(raw)
	if err != nil {
		return err
	}
	if !slices.Contains(events, in.HookEventName) {
		return fmt.Errorf("%w: hook_event_name: %q does not belong at %s", machine.ErrInvalid, in.HookEventName, r.URL.Path)
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
	out, err := claudecode.Handle(ctx, hookGate{g: s.cfg.Gate, a: u, nc: s.cfg.JS.Conn()}, in, opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// hookGate is what Claude Code's HTTP hooks need of toolgate, answered by
// the application layer in this process: no request to itself over NATS.
type hookGate struct {
	g  *gate.Service
	a  gate.Actor // the agent whose hook this is
	nc *nats.Conn // hears the announcements Await waits for
}

var _ claudecode.Gate = hookGate{}

func (h hookGate) Submit(ctx context.Context, call machine.Call) (*machine.Entry, error) {
	return h.g.Submit(ctx, h.a, call)
}

func (h hookGate) Await(ctx context.Context, pendingID string, opts ...client.AwaitOption) (client.Outcome, error) {
	return client.AwaitWith(ctx, h.nc, h.g.ReadReader(h.a), pendingID, opts...)
}

func (h hookGate) Get(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return h.g.Get(ctx, h.a, pendingID)
}

func (h hookGate) Cancel(ctx context.Context, pendingID, by, reason string) (*machine.Entry, error) {
	return h.g.Cancel(ctx, h.a, pendingID, by, reason)
}

// Started claims the call for Claude Code, which runs it itself; an hour,
// as the request API's started gives an agent.
func (h hookGate) Started(ctx context.Context, pendingID, by string) (*machine.Entry, error) {
	return h.g.Claim(ctx, h.a, pendingID, by, time.Hour)
}

func (h hookGate) Succeed(ctx context.Context, pendingID, by string, result json.RawMessage, cost float64) (*machine.Entry, error) {
	return h.g.Complete(ctx, h.a, pendingID, machine.Outcome{Holder: by, Result: result, Cost: cost})
}

func (h hookGate) Fail(ctx context.Context, pendingID, by, errMsg string, cost float64) (*machine.Entry, error) {
	return h.g.Fail(ctx, h.a, pendingID, machine.Outcome{Holder: by, Error: errMsg, Cost: cost})
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

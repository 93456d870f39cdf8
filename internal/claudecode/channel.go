package claudecode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// Claude Code's permission relay, as its channels reference documents it:
// a channel (an MCP server on stdio) that declares both capabilities is
// sent each permission prompt of the session, and answers one by sending
// the verdict notification.
const (
	ChannelCapability           = "claude/channel"
	ChannelPermissionCapability = "claude/channel/permission"
	// MethodPermissionRequest is what Claude Code sends the channel:
	// {request_id, tool_name, description, input_preview}.
	MethodPermissionRequest = "notifications/claude/channel/permission_request"
	// MethodPermission is the channel's verdict: {request_id, behavior}.
	MethodPermission = "notifications/claude/channel/permission"
)

// PermissionPrompt is a permission_request's params. input_preview is the
// tool's input as JSON, cut to 200 characters.
type PermissionPrompt struct {
	RequestID    string `json:"request_id"`
	ToolName     string `json:"tool_name"`
	Description  string `json:"description"`
	InputPreview string `json:"input_preview"`
}

// PermissionVerdict is the channel's answer to one prompt.
type PermissionVerdict struct {
	RequestID string   `json:"request_id"`
	Behavior  Behavior `json:"behavior"` // allow or deny
}

// The bounds of a prompt the channel takes; a prompt past them is left
// to Claude Code's own dialog.
const (
	maxPreview     = 4 << 10
	maxDescription = 1 << 10
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// channelCallPrefix starts the toolCallId of a call the channel made of a
// prompt: a PostToolUse hook tells them by it (see withdrawAnsweredLocally).
const channelCallPrefix = "ch_"

// answeredLocally starts the reason a channel's call records when Claude
// Code answered its prompt first: the tool ran (allowed by the local
// dialog, a hook or its classifier), or the session ended.
const answeredLocally = "answered first in Claude Code"

// Channel relays a Claude Code session's permission prompts to toolgate:
// each prompt becomes a call (the same policy, notifications, quorum and
// receipts as any), and toolgate's decision is sent back as the verdict.
// A call the policy decides is answered at once. A prompt answered first
// in Claude Code is withdrawn from toolgate: by the PostToolUse hook when
// the tool ran (Claude Code does not tell a channel its dialog was
// answered), and when the session ends (the channel's input closes).
type Channel struct {
	g            Gate
	conversation string
	version      string
	opts         Options
	log          *slog.Logger

	mu      sync.Mutex
	out     *json.Encoder
	pending map[string]string // request_id → pendingId, while undecided
	wg      sync.WaitGroup
}

// NewChannel returns a channel whose calls belong to conversation (Claude
// Code's session id, as its hooks see it: CLAUDE_CODE_SESSION_ID).
func NewChannel(g Gate, conversation, version string, opts Options, log *slog.Logger) *Channel {
	return &Channel{g: g, conversation: conversation, version: version, opts: opts, log: log, pending: map[string]string{}}
}

// rpcMessage is one JSON-RPC message of the MCP stream.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// protocolVersions are the MCP revisions the channel speaks (it uses
// nothing any of them changed): it answers with the client's, or the
// newest.
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// Run serves the MCP stream on r and w (newline-delimited JSON-RPC, as
// MCP's stdio transport) until r ends or ctx does, then withdraws the
// calls still undecided: the session ended.
func (c *Channel) Run(ctx context.Context, r io.Reader, w io.Writer) error {
	c.out = json.NewEncoder(w)
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		c.wg.Wait()
	}()
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			select {
			case lines <- bytes.Clone(sc.Bytes()):
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		select {
		case <-ctx.Done():
			c.withdrawAll(ctx, "the channel was stopped")
			return nil
		case err := <-readErr:
			c.withdrawAll(ctx, "the Claude Code session ended (the channel's input closed)")
			return err
		case line := <-lines:
			var m rpcMessage
			if err := json.Unmarshal(line, &m); err != nil {
				c.send(rpcMessage{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: -32700, Message: "parse error: " + err.Error()}})
				continue
			}
			c.handle(ctx, m)
		}
	}
}

func (c *Channel) handle(ctx context.Context, m rpcMessage) {
	switch {
	case m.Method == "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		version := protocolVersions[0]
		if slices.Contains(protocolVersions, p.ProtocolVersion) {
			version = p.ProtocolVersion
		}
		c.send(rpcMessage{JSONRPC: "2.0", ID: m.ID, Result: map[string]any{
			"protocolVersion": version,
			"capabilities": map[string]any{"experimental": map[string]any{
				ChannelCapability: map[string]any{}, ChannelPermissionCapability: map[string]any{},
			}},
			"serverInfo":   map[string]string{"name": "toolgate-claude-channel", "version": c.version},
			"instructions": "toolgate relays this session's permission prompts to its approvers; it sends no messages of its own.",
		}})
	case m.Method == "ping":
		c.send(rpcMessage{JSONRPC: "2.0", ID: m.ID, Result: map[string]any{}})
	case m.Method == MethodPermissionRequest:
		var p PermissionPrompt
		if err := json.Unmarshal(m.Params, &p); err != nil {
			c.log.Warn("permission prompt not read: Claude Code's dialog decides", "err", err)
			return
		}
		if err := p.check(); err != nil {
			c.log.Warn("permission prompt refused: Claude Code's dialog decides", "request_id", p.RequestID, "err", err)
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.relay(ctx, p)
		}()
	case len(m.ID) > 0 && m.Method != "":
		c.send(rpcMessage{JSONRPC: "2.0", ID: m.ID, Error: &rpcError{Code: -32601, Message: "method not found: " + m.Method + " (toolgate's channel only relays permission prompts)"}})
	}
	// Other notifications (initialized, cancelled) and responses: nothing to do.
}

// check bounds what the prompt's fields may hold.
func (p PermissionPrompt) check() error {
	switch {
	case !requestIDPattern.MatchString(p.RequestID):
		return fmt.Errorf("%w: request_id: want 1 to 64 letters, digits, - or _, got %q", machine.ErrInvalid, p.RequestID)
	case p.ToolName == "":
		return fmt.Errorf("%w: tool_name: required", machine.ErrInvalid)
	case len(p.InputPreview) > maxPreview:
		return fmt.Errorf("%w: input_preview: at most %d bytes, got %d", machine.ErrInvalid, maxPreview, len(p.InputPreview))
	case len(p.Description) > maxDescription:
		return fmt.Errorf("%w: description: at most %d bytes, got %d", machine.ErrInvalid, maxDescription, len(p.Description))
	}
	return nil
}

// Arguments are the tool's input, when the preview holds all of it;
// complete is false when Claude Code cut it short (input_preview holds at
// most 200 characters of it), and args then are nil.
func (p PermissionPrompt) Arguments() (args json.RawMessage, complete bool) {
	var v map[string]any
	if json.Unmarshal([]byte(p.InputPreview), &v) != nil || v == nil {
		return nil, false
	}
	return json.RawMessage(p.InputPreview), true
}

// relay submits p's call and sends toolgate's verdict, once there is one.
// A prompt whose input Claude Code cut short is not submitted: toolgate
// would decide a call it cannot see, so Claude Code's dialog decides it.
func (c *Channel) relay(ctx context.Context, p PermissionPrompt) {
	args, complete := p.Arguments()
	if !complete {
		c.log.Info("permission prompt's input cut short (input_preview): Claude Code's dialog decides", "request_id", p.RequestID, "tool_name", p.ToolName)
		return
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	call := machine.Call{
		ToolCallID: channelCallPrefix + p.RequestID + "_" + hex.EncodeToString(b[:]), ToolName: p.ToolName, Arguments: args,
		CallerBotID: c.opts.Caller, ConversationID: c.conversation, Team: c.opts.Team,
	}
	e, err := c.g.Submit(ctx, call)
	if err != nil {
		c.log.Warn("permission prompt not submitted: Claude Code's dialog decides", "request_id", p.RequestID, "err", err)
		return
	}
	c.track(p.RequestID, e.PendingID)
	defer c.untrack(p.RequestID)
	log := c.log.With("request_id", p.RequestID, "pendingId", e.PendingID)
	o, err := c.g.Await(ctx, e.PendingID)
	var rej *client.RejectedError
	switch {
	case errors.As(err, &rej) && rej.Kind == client.Cancelled && strings.Contains(rej.Reason, answeredLocally):
		log.Info("answered first in Claude Code: withdrawn", "reason", rej.Reason)
	case errors.As(err, &rej):
		log.Info("refused", "by", rej.By, "reason", rej.Reason)
		c.verdict(p.RequestID, Deny)
	case err != nil && ctx.Err() != nil:
		// The channel stopped while its call waited (before withdrawAll
		// saw it, or with it): nobody is left to answer.
		c.withdraw(ctx, e.PendingID, answeredLocally+": the channel stopped")
	case err != nil:
		log.Warn("no verdict: Claude Code's dialog decides", "err", err)
	case o.Runnable(), o.Kind == client.Executed:
		log.Info("allowed", "by", o.By)
		c.verdict(p.RequestID, Allow)
	default:
		c.verdict(p.RequestID, Deny)
	}
}

// verdict sends Claude Code the channel's answer to a prompt.
func (c *Channel) verdict(requestID string, b Behavior) {
	params, _ := json.Marshal(PermissionVerdict{RequestID: requestID, Behavior: b})
	c.send(rpcMessage{JSONRPC: "2.0", Method: MethodPermission, Params: params})
}

func (c *Channel) send(m rpcMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.out.Encode(m); err != nil {
		c.log.Warn("writing to Claude Code failed", "err", err)
	}
}

func (c *Channel) track(requestID, pendingID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[requestID] = pendingID
}

func (c *Channel) untrack(requestID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, requestID)
}

// withdrawAll withdraws every call still undecided, saying why.
func (c *Channel) withdrawAll(ctx context.Context, why string) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.pending))
	for _, id := range c.pending {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.withdraw(ctx, id, answeredLocally+": "+why)
	}
}

func (c *Channel) withdraw(ctx context.Context, pendingID, why string) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := c.g.Cancel(wctx, pendingID, c.opts.Caller, "withdrawn: "+why); err != nil && !errors.Is(err, machine.ErrConflict) {
		c.log.Warn("withdrawing failed", "pendingId", pendingID, "err", err)
	}
}

// withdrawAnsweredLocally withdraws the channel's undecided call of the
// prompt whose tool Claude Code ran (in's PostToolUse): its dialog, a hook
// or its classifier answered first. It returns whether there was one.
func withdrawAnsweredLocally(ctx context.Context, g Gate, in Input, opts Options, calls []*machine.Entry) (bool, error) {
	for _, e := range calls {
		if e.Status != machine.StatePendingApproval || !strings.HasPrefix(e.ToolCallID, channelCallPrefix) || !machine.SameJSON(e.ToolArguments, in.ToolInput) {
			continue
		}
		how := "the tool ran"
		if in.HookEventName == EventPostToolUseFailure {
			how = "the tool ran and failed"
		}
		_, err := g.Cancel(ctx, e.PendingID, opts.Caller, "withdrawn: "+answeredLocally+" ("+how+": allowed by its local dialog, a hook or its classifier before toolgate decided)")
		if errors.Is(err, machine.ErrConflict) {
			continue // decided meanwhile: the settling below finds it
		}
		return err == nil, err
	}
	return false, nil
}

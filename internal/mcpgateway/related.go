package mcpgateway

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What a server sends while it answers a request (progress, log messages,
// sampling and elicitation requests) goes to the client on the stream of
// the client's request it relates to: over streamable HTTP that is the
// response stream of the request, which the SDK finds by the request id
// that the context of the request's handler carries. The gateway receives
// those messages on its connection to the server, whose contexts carry
// nothing of the client's request: so it keeps the client's requests in
// flight, and sends each message with the context of the one it relates
// to. A message that relates to none goes where the SDK sends what is
// unrelated: the client's GET stream (on stdio, the one stream).

// inflight is a client's request being answered: its handler's context,
// the SDK's session it came in (over HTTP on the 2026-07-28 revision, each
// request has one of its own), the progress token it gave, and the server
// it was forwarded to ("" when not one server).
type inflight struct {
	ctx    context.Context
	ss     *mcp.ServerSession
	token  string // "" when none
	server string
}

// relate records a client's request in flight, which came in ss, until
// the returned func.
func (s *session) relate(ctx context.Context, ss *mcp.ServerSession, server string, token any) func() {
	r := &inflight{ctx: ctx, ss: ss, server: server, token: tokenKey(token)}
	s.mu.Lock()
	s.inflight = append(s.inflight, r)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.inflight = slices.DeleteFunc(s.inflight, func(x *inflight) bool { return x == r })
		s.mu.Unlock()
	}
}

// related is the context, and the SDK's session, to send the client a
// message with that server sent with upstreamCtx: of the client's request
// in flight that gave the progress token token, or else of the latest
// forwarded to server, or else of the latest of any; upstreamCtx and the
// session's first when there is none. The context ends when upstreamCtx
// does (the server cancelled its request); the returned func must be
// called when the message is sent.
func (s *session) related(upstreamCtx context.Context, server string, token any) (context.Context, *mcp.ServerSession, context.CancelFunc) {
	key := tokenKey(token)
	s.mu.Lock()
	var to *inflight
	for _, r := range slices.Backward(s.inflight) {
		if key != "" && r.token == key || key == "" && r.server == server {
			to = r
			break
		}
	}
	if to == nil && key == "" && len(s.inflight) > 0 {
		to = s.inflight[len(s.inflight)-1]
	}
	ss := s.ss
	s.mu.Unlock()
	if to == nil {
		ctx, cancel := context.WithCancel(upstreamCtx)
		return ctx, ss, cancel
	}
	if to.ss != nil {
		ss = to.ss
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(to.ctx))
	stop := context.AfterFunc(upstreamCtx, cancel)
	return ctx, ss, func() {
		stop()
		cancel()
	}
}

// tokenKey compares progress tokens, which are strings or numbers.
func tokenKey(token any) string {
	if token == nil {
		return ""
	}
	return fmt.Sprintf("%T:%v", token, token)
}

// progressToken is the progress token of a request's params, or nil.
func progressToken(req mcp.Request) any {
	if p, ok := req.GetParams().(interface{ GetProgressToken() any }); ok && !reflect.ValueOf(p).IsNil() {
		return p.GetProgressToken()
	}
	return nil
}

// upstreamMeta is a client request's _meta as its server is sent it: less
// what names the client's revision and session on 2026-07-28 (its
// protocol version, name, capabilities and log level), which is the
// gateway's own to say toward the server, on the revision it negotiated;
// and less the task the client asked for, which is the gateway's.
func upstreamMeta(m mcp.Meta) mcp.Meta {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for _, k := range []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities, mcp.MetaKeyLogLevel, metaTask} {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

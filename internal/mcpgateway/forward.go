package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/wire"
)

// The lists are answered whole, in one page: each upstream server's pages
// are followed, in the order of the servers' names. A server that cannot
// be reached is left out (and logged) unless none can.

// listCache is the caching hint of the lists (2026-07-28's ttlMs and
// cacheScope): stale at once, and for this client only, as they are the
// servers' of its session and, for tools, what the policy lets its
// credential call now.
var listCache = mcp.Cacheable{TTLMs: 0, CacheScope: "private"}

// listTools lists the servers' tools, named as the client calls them,
// leaving out those toolgate's policy denies whatever their arguments.
func (s *session) listTools(ctx context.Context) (*mcp.ListToolsResult, error) {
	type item struct {
		tool     *mcp.Tool
		toolgate string
	}
	var items []item
	var errs []error
	for _, name := range s.gw.servers {
		tools, err := s.ups[name].listTools(ctx)
		if err != nil {
			errs = append(errs, err)
			s.gw.log.Error("tools/list: upstream left out", "server", name, "err", err)
			continue
		}
		for _, t := range tools {
			c := *t
			c.Name = s.gw.clientName(name, t.Name)
			items = append(items, item{tool: &c, toolgate: ToolName(name, t.Name)})
		}
	}
	if len(errs) == len(s.gw.servers) {
		return nil, errors.Join(errs...)
	}
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.toolgate
	}
	denied, unreadable := s.denied(ctx, names)
	if len(unreadable) > 0 {
		schemas := map[string]any{}
		for _, it := range items {
			schemas[it.toolgate] = it.tool.InputSchema
		}
		// A rule that cannot read its argument denies or asks about every
		// call: serving the tools so would look like a broken gateway.
		err := unreadableRules(unreadable, schemas)
		s.gw.log.Error("tools/list: refused", "err", err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	out := &mcp.ListToolsResult{Tools: []*mcp.Tool{}, Cacheable: listCache}
	for _, it := range items {
		if _, no := denied[it.toolgate]; no {
			continue
		}
		out.Tools = append(out.Tools, it.tool)
	}
	return out, nil
}

// denied asks toolgate which of tools its policy denies outright, and on
// which its rules cannot read the argument they mean. When it cannot say,
// nothing is left out: every call is still asked about.
func (s *session) denied(ctx context.Context, tools []string) (denied, unreadable map[string]string) {
	denied, unreadable = map[string]string{}, map[string]string{}
	for len(tools) > 0 {
		n := min(len(tools), wire.MaxDeniedTools)
		reply, err := s.gw.gate.DeniedTools(ctx, wire.DeniedToolsRequest{Tools: tools[:n], Team: s.gw.opts.Team, ConversationID: s.conversation})
		if err != nil {
			s.gw.log.Warn("tools/list: toolgate did not say which tools its policy denies; listing them all (each call is still asked about)", "err", err)
			return denied, nil
		}
		maps.Copy(denied, reply.Denied)
		maps.Copy(unreadable, reply.Unreadable)
		tools = tools[n:]
	}
	return denied, unreadable
}

// each runs f on every server that offers a capability, and fails only
// when none of those could be asked.
func (s *session) each(ctx context.Context, what string, capability func(*mcp.ServerCapabilities) bool, f func(*upstream, *mcp.ClientSession) error) error {
	var errs []error
	asked := 0
	for _, name := range s.gw.servers {
		u := s.ups[name]
		cs, ok, err := u.has(ctx, capability)
		if err == nil && !ok {
			continue
		}
		asked++
		if err == nil {
			err = f(u, cs)
		}
		if err != nil {
			errs = append(errs, err)
			s.gw.log.Error(what+": upstream left out", "server", name, "err", err)
		}
	}
	if asked > 0 && len(errs) == asked {
		return errors.Join(errs...)
	}
	return nil
}

func hasResources(c *mcp.ServerCapabilities) bool   { return c.Resources != nil }
func hasPrompts(c *mcp.ServerCapabilities) bool     { return c.Prompts != nil }
func hasCompletions(c *mcp.ServerCapabilities) bool { return c.Completions != nil }
func hasLogging(c *mcp.ServerCapabilities) bool     { return c.Logging != nil }
func hasSubscribe(c *mcp.ServerCapabilities) bool {
	return c.Resources != nil && c.Resources.Subscribe
}

func (s *session) listResources(ctx context.Context) (*mcp.ListResourcesResult, error) {
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}, Cacheable: listCache}
	err := s.each(ctx, "resources/list", hasResources, func(u *upstream, cs *mcp.ClientSession) error {
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return err
			}
			out.Resources = append(out.Resources, r)
		}
		return nil
	})
	return out, err
}

func (s *session) listResourceTemplates(ctx context.Context) (*mcp.ListResourceTemplatesResult, error) {
	out := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}, Cacheable: listCache}
	err := s.each(ctx, "resources/templates/list", hasResources, func(u *upstream, cs *mcp.ClientSession) error {
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return err
			}
			out.ResourceTemplates = append(out.ResourceTemplates, r)
		}
		return nil
	})
	return out, err
}

// readResource asks the servers in turn: resource URIs are the servers'
// own, so the first that has it answers.
func (s *session) readResource(ctx context.Context, p *mcp.ReadResourceParams) (mcp.Result, error) {
	var res *mcp.ReadResourceResult
	var first error
	err := s.each(ctx, "resources/read", hasResources, func(u *upstream, cs *mcp.ClientSession) error {
		if res != nil {
			return nil
		}
		q := *p
		q.Meta = upstreamMeta(p.Meta)
		r, err := cs.ReadResource(ctx, &q)
		if err != nil {
			if first == nil {
				first = err
			}
			return nil // another server may have it
		}
		res = r
		return nil
	})
	switch {
	case res != nil:
		if res.CacheScope == "" {
			res.CacheScope = "public" // the revision's default, when the server said none
		}
		return res, nil
	case first != nil:
		return nil, first
	case err != nil:
		return nil, err
	}
	return nil, &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Message: fmt.Sprintf("resource %s not found", p.URI)}
}

func (s *session) listPrompts(ctx context.Context) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}, Cacheable: listCache}
	err := s.each(ctx, "prompts/list", hasPrompts, func(u *upstream, cs *mcp.ClientSession) error {
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				return err
			}
			c := *p
			c.Name = s.gw.clientName(u.name, p.Name)
			out.Prompts = append(out.Prompts, &c)
		}
		return nil
	})
	return out, err
}

func (s *session) getPrompt(ctx context.Context, p *mcp.GetPromptParams) (mcp.Result, error) {
	server, name, ok := s.gw.route(p.Name)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", p.Name)}
	}
	cs, err := s.ups[server].session(ctx)
	if err != nil {
		return nil, err
	}
	q := *p
	q.Name, q.Meta = name, upstreamMeta(p.Meta)
	return cs.GetPrompt(ctx, &q)
}

// complete asks the server of the prompt named, or for a resource
// template the servers in turn.
func (s *session) complete(ctx context.Context, p *mcp.CompleteParams) (mcp.Result, error) {
	if p.Ref != nil && p.Ref.Type == "ref/prompt" {
		server, name, ok := s.gw.route(p.Ref.Name)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", p.Ref.Name)}
		}
		cs, err := s.ups[server].session(ctx)
		if err != nil {
			return nil, err
		}
		q, ref := *p, *p.Ref
		ref.Name, q.Ref, q.Meta = name, &ref, upstreamMeta(p.Meta)
		return cs.Complete(ctx, &q)
	}
	var res *mcp.CompleteResult
	var first error
	err := s.each(ctx, "completion/complete", hasCompletions, func(u *upstream, cs *mcp.ClientSession) error {
		if res != nil {
			return nil
		}
		q := *p
		q.Meta = upstreamMeta(p.Meta)
		r, err := cs.Complete(ctx, &q)
		switch {
		case err != nil && first == nil:
			first = err
		case err == nil && (r != nil && len(r.Completion.Values) > 0 || !s.gw.namespaced):
			res = r
		}
		return nil
	})
	switch {
	case res != nil:
		return res, nil
	case first != nil && err != nil:
		return nil, first
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
}

// setLevel passes the client's log level on to the servers that log.
func (s *session) setLevel(ctx context.Context, p *mcp.SetLoggingLevelParams) {
	_ = s.each(ctx, "logging/setLevel", hasLogging, func(_ *upstream, cs *mcp.ClientSession) error {
		return cs.SetLoggingLevel(ctx, p)
	})
}

// subscribe subscribes the client to a resource at every server that
// offers subscriptions (resource URIs are the servers' own); the SDK then
// passes on the servers' notifications/resources/updated for it.
func (s *session) subscribe(ctx context.Context, r *mcp.SubscribeRequest) error {
	return s.each(ctx, "resources/subscribe", hasSubscribe, func(_ *upstream, cs *mcp.ClientSession) error {
		return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: r.Params.URI, Meta: upstreamMeta(r.Params.Meta)})
	})
}

func (s *session) unsubscribe(ctx context.Context, r *mcp.UnsubscribeRequest) error {
	return s.each(ctx, "resources/unsubscribe", hasSubscribe, func(_ *upstream, cs *mcp.ClientSession) error {
		return cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: r.Params.URI, Meta: upstreamMeta(r.Params.Meta)})
	})
}

// elicit passes a server's elicitation/create on to the client, and the
// client's answer back as it is: checking it against the form is the
// server's to do (it may take an answer the form does not describe), and
// so is filling in the form's defaults. The SDK's client and server both
// would (Client's elicitation handling, ServerSession.Elicit): the
// upstream client answers elicitation/create before its SDK does, and the
// form goes to ServerSession.Elicit without its schema, which the sending
// middleware (passSchema) puts back into the request the client receives.
func elicit(ctx context.Context, ss *mcp.ServerSession, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	q := *p
	if q.RequestedSchema != nil {
		ctx = context.WithValue(ctx, elicitSchemaKey{}, q.RequestedSchema)
		q.RequestedSchema = nil
		if q.Mode == "" {
			q.Mode = "form" // as the SDK infers it from the schema
		}
	}
	return ss.Elicit(ctx, &q)
}

type elicitSchemaKey struct{}

// passSchema is the sending middleware that gives an elicitation/create
// the schema elicit took out of it.
func passSchema(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if schema := ctx.Value(elicitSchemaKey{}); schema != nil && method == "elicitation/create" {
			if p, ok := req.GetParams().(*mcp.ElicitParams); ok {
				q := *p
				q.RequestedSchema = schema
				req = &mcp.ServerRequest[mcp.Params]{Session: req.GetSession().(*mcp.ServerSession), Params: &q}
			}
		}
		return next(ctx, method, req)
	}
}

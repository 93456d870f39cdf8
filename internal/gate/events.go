package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// maxEventsWait bounds how long a page of events waits for the first.
const maxEventsWait = 15 * time.Second

// Events answers a page of TOOL_EVENTS after r.After (or from r.SinceMs,
// or those to come), waiting up to r.WaitMs for the first: a reader's
// tail of what toolgate does, resumable by sequence. The events are as
// people read them (masked); an agent gets its own calls' only.
func (s *Service) Events(ctx context.Context, a Actor, r wire.EventsRequest) (*wire.EventsReply, error) {
	if err := a.require("read events", wire.RoleViewer, wire.RoleApprover, wire.RoleAgent); err != nil {
		return nil, err
	}
	if r.WaitMs < 0 || r.WaitMs > maxEventsWait.Milliseconds() {
		return nil, fmt.Errorf("%w: waitMs: %d: want 0 to %d", machine.ErrInvalid, r.WaitMs, maxEventsWait.Milliseconds())
	}
	if r.Limit < 0 || r.Limit > 1000 {
		return nil, fmt.Errorf("%w: limit: %d: want 0 to 1000", machine.ErrInvalid, r.Limit)
	}
	if len(r.Types) > 64 {
		return nil, fmt.Errorf("%w: types: %d names, at most 64", machine.ErrInvalid, len(r.Types))
	}
	for i, name := range r.Types {
		if len(name) > 64 {
			return nil, fmt.Errorf("%w: types[%d]: at most 64 bytes, got %d", machine.ErrInvalid, i, len(name))
		}
	}
	if s.events == nil {
		return nil, fmt.Errorf("%w: this process reads no events", wire.ErrUnavailable)
	}
	limit := cmp.Or(r.Limit, 100)
	var since time.Time
	if r.SinceMs > 0 {
		since = time.UnixMilli(r.SinceMs)
	}
	caller := ""
	if !a.SeesAll() {
		caller = a.Name
	}
	from := r.After
	if from > 0 {
		from++
	}
	reply := &wire.EventsReply{Events: []wire.StreamEvent{}}
	wait := time.Duration(r.WaitMs) * time.Millisecond
	deadline := time.Now().Add(wait)
	for {
		page, next, err := s.events.Page(ctx, from, since, limit, max(time.Until(deadline), time.Millisecond))
		if err != nil {
			return nil, err
		}
		reply.Last = next - 1
		for _, ev := range page {
			if kept(ev, r, caller) {
				reply.Events = append(reply.Events, ev)
			}
		}
		// A page the filters left empty is read on: a full one at once,
		// the end of what the stream holds while the wait lasts.
		if len(reply.Events) > 0 || len(page) == 0 || len(page) < limit && time.Now().After(deadline) {
			return reply, nil
		}
		from, since = next, time.Time{}
	}
}

// kept reports whether the page of a request r keeps ev, whose reader
// sees caller's calls only (any when "").
func kept(ev wire.StreamEvent, r wire.EventsRequest, caller string) bool {
	var e struct {
		Entry struct {
			ConversationID string `json:"conversationId"`
			ToolName       string `json:"toolName"`
			CallerBotID    string `json:"callerBotId"`
		} `json:"entry"`
	}
	if json.Unmarshal(ev.Event, &e) != nil {
		return false
	}
	name := strings.TrimPrefix(ev.Subject, "tool.")
	return (caller == "" || e.Entry.CallerBotID == caller) &&
		(r.ConversationID == "" || e.Entry.ConversationID == r.ConversationID) &&
		(r.ToolName == "" || e.Entry.ToolName == r.ToolName) &&
		(len(r.Types) == 0 || slices.Contains(r.Types, name))
}

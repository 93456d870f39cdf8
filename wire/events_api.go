package wire

import "encoding/json"

// EndpointEvents answers a page of TOOL_EVENTS (EventsReply) in order,
// waiting for the first when there is none yet: what `toolgate events`
// follows, resumable by sequence.
const EndpointEvents = "events"

// EventsRequest asks for the events after After (a sequence of
// TOOL_EVENTS), or, when After is 0, those published from SinceMs (epoch
// milliseconds) on, or with neither those to come. It waits up to WaitMs
// (at most 15 s) for the first; Limit bounds the page (default 100, at
// most 1000). ConversationID, ToolName and Types (public event names,
// approval_granted…) keep only the events that match. An agent reads its
// own calls' events only.
type EventsRequest struct {
	After          uint64   `json:"after,omitempty"`
	SinceMs        int64    `json:"sinceMs,omitempty"`
	WaitMs         int64    `json:"waitMs,omitempty"`
	Limit          int      `json:"limit,omitempty"`
	ConversationID string   `json:"conversationId,omitempty" max:"256"`
	ToolName       string   `json:"toolName,omitempty" max:"128"`
	Types          []string `json:"types,omitempty"`
}

// EventsReply is a page of events, and the sequence to ask after next
// (Last: the last sequence read, whether or not it was kept).
type EventsReply struct {
	Events []StreamEvent `json:"events"`
	Last   uint64        `json:"last"`
}

// StreamEvent is one event of TOOL_EVENTS with where it is in the
// stream: Event is the envelope (Event) as published on Subject.
type StreamEvent struct {
	Seq     uint64          `json:"seq"`
	Subject string          `json:"subject"`
	Event   json.RawMessage `json:"event"`
}

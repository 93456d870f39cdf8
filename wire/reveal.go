package wire

import (
	"encoding/json"

	"github.com/toolgate/toolgate/machine"
)

// EndpointReveal answers a call's arguments in clear (RevealReply) to a
// role the policy's reveal names, and records who asked (RevealRequest).
const EndpointReveal = "reveal"

// RevealRequest asks for the arguments of the call PendingID as they
// are, unmasked.
type RevealRequest struct {
	PendingID string `json:"pendingId,omitempty"`
}

// RevealReply is a call's arguments as they are: what runs, and the
// agent's own when an approver edited them. Reveal is the record the
// request left.
type RevealReply struct {
	PendingID         string          `json:"pendingId"`
	ToolArguments     json.RawMessage `json:"toolArguments"`
	OriginalArguments json.RawMessage `json:"originalArguments,omitempty"`
	Reveal            Reveal          `json:"reveal"`
}

// Reveal records that someone was shown a call's arguments in clear: who
// (By, with the roles they held), when (At, epoch milliseconds), and the
// call's revision they were shown and its state then.
type Reveal struct {
	PendingID string        `json:"pendingId"`
	By        string        `json:"by"`
	Roles     []Role        `json:"roles"`
	At        int64         `json:"at"`
	Revision  uint64        `json:"revision"`
	State     machine.State `json:"state"`
}

// RevealsStream keeps the reveals of every call, one subject per call
// (RevealSubject), for as long as TOOL_EVENTS keeps events.
const RevealsStream = "TOOL_REVEALS"

// RevealSubject is where the reveals of the call pendingID are recorded.
func RevealSubject(pendingID string) string { return internalPrefix + "reveal." + pendingID }

// HistoryRevealed is the event of a history item that is no transition:
// a reveal of the call's arguments (its Actor who, At when, Revision the
// revision shown; From and To the call's state then).
const HistoryRevealed machine.Event = "revealed"

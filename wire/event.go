package wire

import (
	_ "embed"
	"fmt"

	"github.com/toolgate/toolgate/machine"
)

// EventVersion is the version of the events' schema (Event.V). Fields are
// added without a new version, and consumers ignore what they do not know;
// a field removed or changed in meaning raises it.
const EventVersion = 1

// EventSchema is the JSON Schema (2020-12) of Event, served at
// /v1/schemas/event.json and described in docs/events.md.
//
//go:embed event.schema.json
var EventSchema []byte

// Event is the envelope published for every transition: what happened, to
// which entry, from which state, by whom and why, with the entry as it was
// written.
type Event struct {
	V        int           `json:"v"`  // EventVersion
	ID       string        `json:"id"` // <pendingId>:<revision>, also the Nats-Msg-Id
	Type     string        `json:"type"`
	Event    machine.Event `json:"event"`
	From     machine.State `json:"from,omitempty"`
	To       machine.State `json:"to"`
	Actor    string        `json:"actor,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	At       int64         `json:"at"`
	Revision uint64        `json:"revision"`
	// Receipt is the signed receipt this transition appended to the
	// entry's chain. The entry of an event leaves its receipts out (the
	// chain grows with every transition, and every subscriber would
	// decode it all again): the events of a call carry its chain one
	// receipt each.
	Receipt *machine.Receipt `json:"receipt,omitempty"`
	Entry   *machine.Entry   `json:"entry"`
}

// WorkItem is queued on toolgate.work.<tool> when a call may run. The executor
// claims the entry by CAS before running anything; the item only says where
// to look.
type WorkItem struct {
	PendingID string `json:"pendingId"`
	ToolName  string `json:"toolName"`
	Revision  uint64 `json:"revision"`
}

// MsgID is the de-duplication id (Nats-Msg-Id) of what is published for
// one revision of an entry: the relay's event and work item, and the
// timer's queueing of a call that became due. A replay after a crash, or a
// second publisher, sends the same id and is dropped.
func MsgID(pendingID string, revision uint64) string {
	return fmt.Sprintf("%s:%d", pendingID, revision)
}

// RequeueMsgID is the de-duplication id of a call queued again after its
// executor's lease ran out at revision.
func RequeueMsgID(pendingID string, revision uint64) string {
	return MsgID(pendingID, revision) + ":requeue"
}

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
	V int `json:"v"` // EventVersion
	// ID is <pendingId>:<revision>, also the Nats-Msg-Id; of the first
	// of two transitions one revision made, <pendingId>:<revision>.<event>
	// (EventsOf).
	ID     string        `json:"id"`
	Type   string        `json:"type"`
	Event  machine.Event `json:"event"`
	From   machine.State `json:"from,omitempty"`
	To     machine.State `json:"to"`
	Actor  string        `json:"actor,omitempty"`
	Reason string        `json:"reason,omitempty"`
	// DecidedBy is what decided, on an event of a decision
	// (machine.Transition.DecidedBy).
	DecidedBy machine.Decider `json:"decidedBy,omitempty"`
	// Interrupt is set on a rejection that asks the agent to stop its
	// turn (machine.Transition.Interrupt).
	Interrupt bool   `json:"interrupt,omitempty"`
	At        int64  `json:"at"`
	Revision  uint64 `json:"revision"`
	// Receipt is the signed receipt this transition appended to the
	// entry's chain. The entry of an event leaves its receipts out (the
	// chain grows with every transition, and every subscriber would
	// decode it all again): the events of a call carry its chain one
	// receipt each.
	Receipt *machine.Receipt `json:"receipt,omitempty"`
	Entry   *machine.Entry   `json:"entry"`
}

// MsgID is the de-duplication id (Nats-Msg-Id) of the relay's event for
// one revision of an entry. A replay after a crash, or a second relay,
// sends the same id and is dropped.
func MsgID(pendingID string, revision uint64) string {
	return fmt.Sprintf("%s:%d", pendingID, revision)
}

// EventsOf are the events of revision of e, one for each of its
// transitions that has one (a renewed lease has none), in the order they
// were made, each with its ID: MsgID, and for the first of two
// transitions one write made (machine.Entry.PriorTransition), MsgID and
// "." and its event. Their Entry is e.
func EventsOf(e *machine.Entry, revision uint64) []Event {
	var evs []Event
	for _, t := range e.Transitions() {
		subject, ok := EventSubject(t.Event)
		if !ok {
			continue
		}
		id := MsgID(e.PendingID, revision)
		if t == e.PriorTransition {
			id += "." + string(t.Event)
		}
		evs = append(evs, Event{
			V: EventVersion, ID: id, Type: subject, Event: t.Event, From: t.From, To: t.To,
			Actor: t.Actor, Reason: t.Reason, DecidedBy: t.DecidedBy, Interrupt: t.Interrupt, At: t.At, Revision: revision, Entry: e,
		})
	}
	return evs
}

package wire

import (
	"encoding/json"
	"strings"
	"time"
)

// toolgate's events as CloudEvents 1.0: each event (Event) is the data of
// a CloudEvent whose id is the event's id, its source CloudEventSource,
// its type CloudEventTypePrefix and the event's public name
// (dev.toolgate.approval_granted), its subject the call's pendingId and
// its time the transition's. On TOOL_EVENTS the attributes are headers of
// the message, as the CloudEvents NATS binding lays them out (binary
// mode: ce-specversion, ce-id, …, and content-type), the body the event
// as ever; a webhook channel with format cloudevents sends the structured
// form, application/cloudevents+json.

// The CloudEvents attributes toolgate sets.
const (
	CloudEventSource     = "toolgate"
	CloudEventTypePrefix = "dev.toolgate."
	// CloudEventsContentType is the structured form's media type.
	CloudEventsContentType = "application/cloudevents+json"
	// EventSchemaPath is where the HTTP API serves the event's schema,
	// the structured form's dataschema under the inbox's base URL.
	EventSchemaPath = "/v1/schemas/event.json"
)

// CloudEventType is the CloudEvents type of an event published on
// subject (tool.approval_granted → dev.toolgate.approval_granted).
func CloudEventType(subject string) string {
	return CloudEventTypePrefix + strings.TrimPrefix(subject, eventPrefix)
}

// CloudEventHeaders are the CloudEvents NATS binding's headers of ev, as
// the relay sets them on TOOL_EVENTS.
func CloudEventHeaders(ev *Event) map[string][]string {
	return map[string][]string{
		"ce-specversion": {"1.0"},
		"ce-id":          {ev.ID},
		"ce-source":      {CloudEventSource},
		"ce-type":        {CloudEventType(ev.Type)},
		"ce-subject":     {ev.pendingID()},
		"ce-time":        {time.UnixMilli(ev.At).UTC().Format(time.RFC3339Nano)},
		"content-type":   {"application/json"},
	}
}

// StructuredCloudEvent is ev, whose JSON is data, as a structured
// CloudEvent (CloudEventsContentType). schemaBase, when not "", is the
// base URL the HTTP API is served at: dataschema is its event schema.
func StructuredCloudEvent(ev *Event, data json.RawMessage, schemaBase string) ([]byte, error) {
	ce := struct {
		SpecVersion     string          `json:"specversion"`
		ID              string          `json:"id"`
		Source          string          `json:"source"`
		Type            string          `json:"type"`
		Subject         string          `json:"subject"`
		Time            string          `json:"time"`
		DataContentType string          `json:"datacontenttype"`
		DataSchema      string          `json:"dataschema,omitempty"`
		Data            json.RawMessage `json:"data"`
	}{"1.0", ev.ID, CloudEventSource, CloudEventType(ev.Type), ev.pendingID(),
		time.UnixMilli(ev.At).UTC().Format(time.RFC3339Nano), "application/json", "", data}
	if schemaBase != "" {
		ce.DataSchema = strings.TrimSuffix(schemaBase, "/") + EventSchemaPath
	}
	return json.Marshal(ce)
}

// pendingID is the id of ev's call ("" without an entry).
func (ev *Event) pendingID() string {
	if ev.Entry == nil {
		return ""
	}
	return ev.Entry.PendingID
}

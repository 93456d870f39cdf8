package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	tgpolicy "github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// natsCloudEvent is a NATS message as the CloudEvents NATS binding reads
// it in binary mode: the attributes in ce- headers, the data the body.
type natsCloudEvent struct {
	msg     *nats.Msg
	version spec.Version
}

var ceSpecs = spec.WithPrefix("ce-")

func (m natsCloudEvent) ReadEncoding() binding.Encoding {
	if m.version == nil {
		return binding.EncodingUnknown
	}
	return binding.EncodingBinary
}

func (m natsCloudEvent) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m natsCloudEvent) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	for k, v := range m.msg.Header {
		if attr := m.version.Attribute(k); attr != nil {
			if err := w.SetAttribute(attr, v[0]); err != nil {
				return err
			}
		}
	}
	if ct := m.msg.Header.Get("content-type"); ct != "" {
		if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), ct); err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(m.msg.Data))
}

func (m natsCloudEvent) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if v := m.msg.Header.Get(attr.PrefixedName()); v != "" {
		return attr, v
	}
	return attr, nil
}

func (m natsCloudEvent) GetExtension(string) any { return nil }

func (m natsCloudEvent) Finish(error) error { return nil }

// TestCloudEvents_TheSDKReadsTheWebhookAndTheNATSHeaders: a webhook
// channel with format cloudevents delivers a structured CloudEvent, still
// signed as Standard Webhooks sign, and the event on TOOL_EVENTS carries
// the attributes as the NATS binding's headers, its body the envelope as
// ever; the CloudEvents SDK reads both as the same event.
func TestCloudEvents_TheSDKReadsTheWebhookAndTheNATSHeaders(t *testing.T) {
	t.Parallel()
	secret := tgpolicy.NewWebhookSecret()
	hook := ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  inboxUrl: https://toolgate.example\n  notify:\n    - {type: webhook, url: %q, secret: %q, format: cloudevents}\n", hook.URL+"/hook", secret))
	sub, err := env.NC.SubscribeSync("tool.>")
	require.NoError(t, err)
	ntStart(t, env, engine, nil, ntFast(3)...)
	e := ntSubmit(t, m, machine.Call{ToolCallID: "ce"})

	got := hook.next(t, "the delivery")
	assert.Equal(t, wire.CloudEventsContentType, got.Header.Get("Content-Type"))
	require.NoError(t, swVerifier(t, secret).Verify(got.Body, got.Header), "signed as before")
	req := httptest.NewRequest("POST", "/hook", bytes.NewReader(got.Body))
	req.Header = got.Header
	fromHook, err := cehttp.NewEventFromHTTPRequest(req)
	require.NoError(t, err)
	require.NoError(t, fromHook.Validate())
	assert.Equal(t, "dev.toolgate.approval_required", fromHook.Type())
	assert.Equal(t, "toolgate", fromHook.Source())
	assert.Equal(t, e.PendingID, fromHook.Subject())
	assert.Equal(t, "https://toolgate.example/v1/schemas/event.json", fromHook.DataSchema())
	var data wire.Event
	require.NoError(t, json.Unmarshal(fromHook.Data(), &data))
	assert.Equal(t, fromHook.ID(), data.ID)
	assert.Equal(t, e.PendingID, data.Entry.PendingID)
	assert.WithinDuration(t, time.UnixMilli(data.At), fromHook.Time(), time.Millisecond)

	msg, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	fromNATS, err := binding.ToEvent(t.Context(), natsCloudEvent{msg: msg, version: ceSpecs.Version(msg.Header.Get("ce-specversion"))})
	require.NoError(t, err)
	require.NoError(t, fromNATS.Validate())
	assert.Equal(t, fromHook.ID(), fromNATS.ID())
	assert.Equal(t, fromHook.Type(), fromNATS.Type())
	assert.Equal(t, fromHook.Subject(), fromNATS.Subject())
	assert.Equal(t, "application/json", fromNATS.DataContentType())
	var body wire.Event
	require.NoError(t, json.Unmarshal(msg.Data, &body), "the body is the envelope as ever")
	assert.Equal(t, data.ID, body.ID)
}

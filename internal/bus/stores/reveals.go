package stores

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/wire"
)

// RevealLog is TOOL_REVEALS: who was shown which call's arguments in
// clear, and when, one subject per call.
type RevealLog struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// NewRevealLog returns the log over the provisioned stream.
func NewRevealLog(js jetstream.JetStream, stream jetstream.Stream) *RevealLog {
	return &RevealLog{js: js, stream: stream}
}

// Append records one reveal.
func (l *RevealLog) Append(ctx context.Context, r wire.Reveal) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (*jetstream.PubAck, error) {
		// An attempt whose answer was lost, sent again, is recorded once.
		return l.js.PublishMsg(ctx, &nats.Msg{Subject: wire.RevealSubject(r.PendingID), Data: data},
			jetstream.WithExpectStream(wire.RevealsStream), jetstream.WithMsgID(fmt.Sprintf("%s:%s:%d", r.PendingID, r.By, r.At)))
	})
	return err
}

// Of returns the reveals of the call pendingID, oldest first.
func (l *RevealLog) Of(ctx context.Context, pendingID string) ([]wire.Reveal, error) {
	return readAll[wire.Reveal](ctx, l.stream, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy, FilterSubject: wire.RevealSubject(pendingID),
	})
}

package consumer

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Position is where a durable consumer is in its stream, as the server
// that keeps it reports it.
type Position struct {
	Consumer string
	// Pending are the messages not yet delivered, AckPending those
	// delivered and not yet acked, Redelivered those delivered more than
	// once and not yet acked.
	Pending, AckPending, Redelivered uint64
	// AckFloor is the stream sequence at and below which every message
	// was acked.
	AckFloor uint64
}

func positionOf(info *jetstream.ConsumerInfo) Position {
	return Position{Consumer: info.Name, Pending: info.NumPending, AckPending: uint64(info.NumAckPending),
		Redelivered: uint64(info.NumRedelivered), AckFloor: info.AckFloor.Stream}
}

// Durables returns the position of every durable consumer of stream (an
// ephemeral one, such as a KV watch, is one process's business), one
// request to the stream. Those it read before a failure come with its
// error.
func Durables(ctx context.Context, js jetstream.JetStream, stream string) ([]Position, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	var out []Position
	list := s.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Config.Durable != "" {
			out = append(out, positionOf(info))
		}
	}
	return out, list.Err()
}

// Durable returns the position of stream's consumer name, and false when
// there is no such consumer.
func Durable(ctx context.Context, js jetstream.JetStream, stream, name string) (Position, bool, error) {
	c, err := js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return Position{}, false, nil
	} else if err != nil {
		return Position{}, false, err
	}
	return positionOf(c.CachedInfo()), true, nil
}

// Delete removes stream's consumer name, if there is one.
func Delete(ctx context.Context, js jetstream.JetStream, stream, name string) error {
	if err := js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	return nil
}

// Bounds returns the first and the last sequence stream holds.
func Bounds(ctx context.Context, js jetstream.JetStream, stream string) (first, last uint64, err error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	st := s.CachedInfo().State
	return st.FirstSeq, st.LastSeq, nil
}

// Consumers calls fn with the name of every consumer of stream, existing
// set, and returns. From before it lists them until stop is called, it
// calls fn with the name of each consumer created on stream (heard from
// JetStream's advisories), so that none created meanwhile goes unheard
// of.
func Consumers(ctx context.Context, js jetstream.JetStream, stream string, fn func(name string, existing bool)) (stop func(), err error) {
	sub, err := js.Conn().Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED."+stream+".*", func(m *nats.Msg) {
		fn(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], false)
	})
	if err != nil {
		return nil, err
	}
	stop = func() { _ = sub.Unsubscribe() }
	s, err := js.Stream(ctx, stream)
	if err != nil {
		stop()
		return nil, err
	}
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		fn(name, true)
	}
	if err := names.Err(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// Publish stores data with header on the stream that takes subject, once:
// a publish again with the same msgID within the stream's duplicate
// window is dropped, so that a step redelivered may publish again.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, header map[string][]string, msgID string) error {
	m := nats.NewMsg(subject)
	m.Data = data
	for k, v := range header {
		m.Header[k] = v
	}
	_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID))
	return err
}

package consumer

import (
	"context"

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
		if info.Config.Durable == "" {
			continue
		}
		out = append(out, Position{Consumer: info.Name, Pending: info.NumPending, AckPending: uint64(info.NumAckPending), Redelivered: uint64(info.NumRedelivered)})
	}
	return out, list.Err()
}

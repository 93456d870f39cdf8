package gate

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// WorkConsumer creates the consumer of a tool's work queue that executors
// share, or brings its configuration up to date, and names it. Executors
// fetch from it and acknowledge; toolgate alone configures it.
func (s *Service) WorkConsumer(ctx context.Context, a Actor, r wire.WorkConsumerRequest) (wire.WorkConsumerReply, error) {
	if err := a.require("consume work queues", wire.RoleExecutor); err != nil {
		return wire.WorkConsumerReply{}, err
	}
	if !machine.ValidToolName(r.Tool) {
		return wire.WorkConsumerReply{}, fmt.Errorf("%w: tool %q: not a tool name", machine.ErrInvalid, r.Tool)
	}
	ackWait := time.Duration(r.AckWaitMs) * time.Millisecond
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return wire.WorkConsumerReply{}, err
	}
	durable := wire.ExecutorDurable(r.Tool)
	// Bounded: a JetStream API request that went to a meta leader that
	// died is never answered, and the executor asks again.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = js.CreateOrUpdateConsumer(ctx, wire.WorkStream, jetstream.ConsumerConfig{
		Durable:        durable,
		Description:    "toolgate: executors of " + r.Tool,
		FilterSubjects: []string{wire.WorkSubject(r.Tool)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		// The executor's runner gives up on an item itself; the server
		// must not drop one silently before it does.
		MaxDeliver: -1,
	})
	if err != nil {
		return wire.WorkConsumerReply{}, fmt.Errorf("consumer %s on %s: %w", durable, wire.WorkStream, err)
	}
	prefix := wire.WorkAPIPrefix
	if a.system {
		prefix = jetstream.DefaultAPIPrefix
	}
	return wire.WorkConsumerReply{Stream: wire.WorkStream, Consumer: durable, APIPrefix: prefix}, nil
}

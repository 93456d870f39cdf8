package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// RelayConfig tunes the relay.
type RelayConfig struct {
	// Durable names the relay's consumer on the bucket's stream. Every relay
	// process uses the same one, so they share the work and a restarted
	// relay goes on where the last one stopped.
	Durable string
	// AckWait is how long a revision handed to a relay that died stays
	// unclaimed before another relay gets it.
	AckWait time.Duration
	// Mask, when set, returns what subscribers of TOOL_EVENTS may see of
	// an entry: its secrets masked (see policy.Masker), or nil when it
	// has none. The agent that asked hears of its call on its own subject
	// as it is.
	Mask func(*machine.Entry) *machine.Entry
}

// Relay turns every revision written to the tool_calls bucket into the event
// of the transition it recorded, on that transition's subject in
// TOOL_EVENTS, and announces it to the agent awaiting the call.
// (Executors take runnable calls from toolgate's request API, which
// follows the bucket itself: gate.Service.TakeWork.)
//
// The KV write is the commit point; the relay only reads what was
// committed. It acks a revision after JetStream has stored everything
// published for it, and publishes with Nats-Msg-Id <pendingId>:<revision>,
// so a crash anywhere between the write and the ack loses nothing (the
// revision is redelivered) and doubles nothing (the replay is dropped as a
// duplicate).
type Relay struct {
	js  jetstream.JetStream
	cfg RelayConfig
	log *slog.Logger

	// beforePublish and beforeAck, when set, are failure points for tests:
	// an error stops the relay there, as a crash would.
	beforePublish func(revision uint64) error
	beforeAck     func(revision uint64) error
}

// RelayDurable is the relay's consumer on the bucket's stream, shared by
// every relay process.
const RelayDurable = "toolgate-relay"

// NewRelay returns a relay; Run starts it.
func NewRelay(js jetstream.JetStream, cfg RelayConfig, log *slog.Logger) *Relay {
	if cfg.Durable == "" {
		cfg.Durable = RelayDurable
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 10 * time.Second
	}
	return &Relay{js: js, cfg: cfg, log: log}
}

// relayed is one revision whose publishes are in flight.
type relayed struct {
	msg      jetstream.Msg
	revision uint64
	acks     []jetstream.PubAckFuture // its events'; none when it has none
}

// receiptOf returns the receipt of the transition ev at at by actor, one
// of the last two of receipts, or nil.
func receiptOf(receipts []machine.Receipt, ev machine.Event, at int64, actor string) *machine.Receipt {
	for i := len(receipts) - 1; i >= 0 && i >= len(receipts)-2; i-- {
		if r := &receipts[i]; r.Event == ev && r.At == at && r.Actor == actor {
			return r
		}
	}
	return nil
}

// crashed is the error of a failure point: it stops the relay, as a crash
// would, where every other error only restarts it.
type crashed struct{ error }

func (c crashed) Unwrap() error { return c.error }

// Run relays until ctx ends or a failure point fires. A JetStream error
// (a request timing out on a busy cluster, a consumer leader moving, the
// consumer deleted) restarts it after a backoff: the relay is what turns
// writes into events, and giving up would stop them all.
func (r *Relay) Run(ctx context.Context) error {
	return consumer.RunRestarting(ctx, r.log, "relay", func(ctx context.Context) error {
		err := r.run(ctx)
		var c crashed
		if errors.As(err, &c) {
			return consumer.Permanent(c.error)
		}
		return err
	})
}

func (r *Relay) run(ctx context.Context) error {
	stream := "KV_" + wire.CallsBucket
	cons, err := r.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       r.cfg.Durable,
		Description:   "toolgate relay: KV revisions to events",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.cfg.AckWait,
		MaxAckPending: 4096,
	})
	if err != nil {
		return fmt.Errorf("relay: consumer %s on %s: %w", r.cfg.Durable, stream, err)
	}
	// Pulls expire after 5s (not nats.go's 30s): a pull held by a server
	// that died is given up on, and the relay pulls again, within seconds.
	iter, err := cons.Messages(jetstream.PullMaxMessages(512), jetstream.PullExpiry(5*time.Second))
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	// Neither goroutine outlives this run, which a restart follows: cancel
	// stops the iterator, and the acker ends when inflight closes.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		<-ctx.Done()
		iter.Stop()
	})

	// Publishing is asynchronous so the relay keeps up with many writers;
	// the acker waits for each revision's publishes in the order they were
	// sent and only then acks it.
	inflight := make(chan relayed, 1024)
	ackerDone := make(chan error, 1)
	wg.Go(func() {
		err := r.acker(ctx, inflight)
		if err != nil {
			cancel()
		}
		ackerDone <- err
	})

	stalled := make(chan error, 1)
	wg.Go(func() {
		if err := consumer.WatchStall(ctx, consumer.Watch{JS: r.js, Stream: stream, Durable: r.cfg.Durable, Consumer: cons,
			InHand: func() int { return len(inflight) }, Log: r.log.With("consumer", r.cfg.Durable)}); err != nil {
			stalled <- err
			cancel()
		}
	})

	err = r.pump(ctx, iter, inflight)
	close(inflight)
	aerr := <-ackerDone
	select {
	case err := <-stalled:
		return fmt.Errorf("relay: %w", err)
	default:
	}
	if aerr != nil {
		return aerr
	}
	if ctx.Err() != nil && (errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

func (r *Relay) pump(ctx context.Context, iter jetstream.MessagesContext, inflight chan<- relayed) error {
	for {
		msg, err := iter.Next()
		if err != nil {
			return err
		}
		item, err := r.publish(msg)
		if err != nil {
			return err
		}
		select {
		case inflight <- item:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// publish sends the events of one revision: one, or two when one write
// made two transitions (machine.Entry.PriorTransition).
func (r *Relay) publish(msg jetstream.Msg) (relayed, error) {
	meta, err := msg.Metadata()
	if err != nil {
		return relayed{}, fmt.Errorf("relay: metadata: %w", err)
	}
	item := relayed{msg: msg, revision: meta.Sequence.Stream}
	if op := msg.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return item, nil
	}
	e, err := jsio.DecodeEntry(msg.Data())
	if err != nil {
		// Nothing later can make this revision readable: say so and move on.
		r.log.Error("relay: undecodable revision", "subject", msg.Subject(), "revision", item.revision, "err", err)
		return item, nil
	}
	receipts := e.Receipts
	e.Receipts = nil
	var masked *machine.Entry
	if r.cfg.Mask != nil {
		masked = r.cfg.Mask(e)
	}
	var ev []byte // the last event, as the agent hears it
	for _, event := range wire.EventsOf(e, item.revision) {
		if r.beforePublish != nil {
			if err := r.beforePublish(item.revision); err != nil {
				return relayed{}, crashed{err}
			}
		}
		event.Receipt = receiptOf(receipts, event.Event, event.At, event.Actor)
		ev, _ = json.Marshal(event)
		published := ev
		if masked != nil {
			event.Entry = masked
			published, _ = json.Marshal(event)
		}
		// The CloudEvents attributes ride as headers (the NATS binding's
		// binary mode); the body is the envelope as ever.
		msg := &nats.Msg{Subject: event.Type, Data: published, Header: wire.CloudEventHeaders(&event)}
		fut, err := r.js.PublishMsgAsync(msg, jetstream.WithMsgID(event.ID))
		if err != nil {
			return relayed{}, fmt.Errorf("relay: publish %s: %w", event.ID, err)
		}
		item.acks = append(item.acks, fut)
	}
	if ev == nil {
		return item, nil
	}
	// Agents awaiting this call hear of it on its own subject: core NATS,
	// nothing stored. One that misses it (not yet subscribed, reconnecting)
	// reads the entry again, which is why losing this publish is harmless.
	if err := r.js.Conn().Publish(wire.EntrySubject(e.CallerBotID, e.PendingID), ev); err != nil {
		return relayed{}, fmt.Errorf("relay: announce %s: %w", e.PendingID, err)
	}
	return item, nil
}

func (r *Relay) acker(ctx context.Context, inflight <-chan relayed) error {
	for item := range inflight {
		stored := true
		for _, ack := range item.acks {
			select {
			case <-ack.Ok():
			case err := <-ack.Err():
				// Leave it to redelivery; the replay is de-duplicated.
				r.log.Warn("relay: publish failed, will retry", "revision", item.revision, "err", err)
				stored = false
			case <-ctx.Done():
				return nil
			}
		}
		if !stored {
			_ = item.msg.NakWithDelay(time.Second)
			continue
		}
		if r.beforeAck != nil {
			if err := r.beforeAck(item.revision); err != nil {
				return crashed{err}
			}
		}
		if err := item.msg.Ack(); err != nil {
			r.log.Warn("relay: ack failed", "revision", item.revision, "err", err)
		}
	}
	return nil
}

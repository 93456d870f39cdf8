package backup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/wire"
)

// clockSkew is how far the clocks of a cluster's servers may be apart:
// the events of a revision are looked for from that long before the
// revision was written, as another server may have stamped them.
const clockSkew = time.Minute

// rewindRelay makes the restored events agree with the restored calls.
// The events stream was taken after the calls' bucket, so it may hold
// events of revisions the relay had not acknowledged when the bucket was
// taken, and of revisions after it. The relay's consumer is set back to
// its acknowledgement floor, so that it delivers every revision after
// it again (those acknowledged out of order too), and every event of
// those revisions is deleted: the relay then publishes each once, from
// the calls as restored.
func rewindRelay(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	callsStream := "KV_" + wire.CallsBucket
	calls, err := js.Stream(ctx, callsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	cons, err := calls.Consumer(ctx, relay.RelayDurable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil // no relay ever ran: it will relay every revision
	} else if err != nil {
		return err
	}
	floor := cons.CachedInfo().AckFloor.Stream
	var reset struct{}
	if err := request(ctx, nc, fmt.Sprintf("$JS.API.CONSUMER.RESET.%s.%s", callsStream, relay.RelayDurable), map[string]any{}, &reset); err != nil {
		return fmt.Errorf("set the relay back to revision %d: %w", floor+1, err)
	}
	// The first revision after the floor was written before any of its
	// events; without one, the events of later revisions came after the
	// last revision there is.
	first, err := calls.GetMsg(ctx, floor+1, jetstream.WithGetMsgSubject(">"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		first, err = calls.GetLastMsgForSubject(ctx, ">")
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // no revision: no event to drop
	} else if err != nil {
		return err
	}
	return dropEventsAfter(ctx, js, floor, first.Time.Add(-clockSkew))
}

// dropEventsAfter deletes the events stamped since since of revisions
// after floor.
func dropEventsAfter(ctx context.Context, js jetstream.JetStream, floor uint64, since time.Time) error {
	events, err := js.Stream(ctx, wire.EventsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	cons, err := events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err != nil {
		return err
	}
	// Nothing publishes meanwhile: the events to read are those there now.
	pending := cons.CachedInfo().NumPending
	if pending == 0 {
		return nil
	}
	iter, err := cons.Messages()
	if err != nil {
		return err
	}
	defer iter.Stop()
	for range pending {
		msg, err := iter.Next(jetstream.NextContext(ctx))
		if err != nil {
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		if rev, ok := revision(msg.Headers().Get(jetstream.MsgIDHeader)); ok && rev > floor {
			if err := events.DeleteMsg(ctx, meta.Sequence.Stream); err != nil {
				return fmt.Errorf("delete event %d: %w", meta.Sequence.Stream, err)
			}
		}
	}
	return nil
}

// revision is the revision of the call an event's id names:
// <pendingId>:<revision>, or <pendingId>:<revision>.<event> (wire.EventsOf).
func revision(id string) (uint64, bool) {
	i := strings.LastIndexByte(id, ':')
	if i < 0 {
		return 0, false
	}
	rev, _, _ := strings.Cut(id[i+1:], ".")
	n, err := strconv.ParseUint(rev, 10, 64)
	return n, err == nil
}

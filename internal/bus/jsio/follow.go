package jsio

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/consumer"
)

// followHeartbeat is how often the NATS server tells a quiet watch that
// it is still there: after two missed, the watch starts again from the
// last revision it had, on a new consumer. The bucket's stream changing
// leader takes its consumers with it, and a watch that learned of it only
// after KV's own ten seconds (WatchAll's heartbeats) left every view of
// the bucket (the call index, the timer, the work queue, the grants) that
// far behind.
const followHeartbeat = time.Second

// FollowBucket keeps a process's view of every key of kv until ctx ends.
// Each life of it (consumer.RunRestarting: again after a failure) opens a
// watch and asks start for a fresh view: apply takes every entry, first
// those of the bucket as it was, until loaded is called once they are
// all in, then every change. unsync ends a life: the view is not to be
// trusted until the next one has loaded.
//
// The watch is what KV's WatchAll is, an ordered consumer of the bucket's
// stream from each key's last revision, with heartbeats of its own
// (followHeartbeat); a lost consumer is recreated from where it stopped,
// within the same life.
func FollowBucket(ctx context.Context, log *slog.Logger, name string, js jetstream.JetStream, kv jetstream.KeyValue, unsync func(),
	start func() (apply func(jetstream.KeyValueEntry), loaded func())) error {
	bucket := kv.Bucket()
	prefix := "$KV." + bucket + "."
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{prefix + ">"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy}
	return FollowStream(ctx, log, name, js, "KV_"+bucket, cfg, unsync, func() (func(jetstream.Msg, *jetstream.MsgMetadata), func()) {
		apply, loaded := start()
		return func(msg jetstream.Msg, meta *jetstream.MsgMetadata) {
			if key, ok := strings.CutPrefix(msg.Subject(), prefix); ok {
				apply(&entry{bucket: bucket, key: key, value: msg.Data(), meta: meta, op: operation(msg)})
			}
		}, loaded
	})
}

// FollowStream is FollowBucket for any stream's messages cfg selects:
// apply takes each, first those there when a life's consumer was made,
// then loaded is called, then apply takes those that come.
func FollowStream(ctx context.Context, log *slog.Logger, name string, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, unsync func(),
	start func() (apply func(jetstream.Msg, *jetstream.MsgMetadata), loaded func())) error {
	defer unsync()
	return consumer.RunRestarting(ctx, log, name, func(ctx context.Context) error {
		defer unsync()
		cons, err := js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		it, err := cons.Messages(jetstream.PullHeartbeat(followHeartbeat))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()
		defer it.Stop()
		apply, loaded := start()
		// What was there is the messages pending when the consumer was
		// made, or up to one with none left after it, whichever comes
		// first (writes go on meanwhile).
		var initial uint64
		if info := cons.CachedInfo(); info != nil {
			initial = info.NumPending
		}
		if initial == 0 {
			loaded()
		}
		for {
			msg, err := it.Next()
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				return fmt.Errorf("%s: watch ended: %w", name, err)
			}
			meta, err := msg.Metadata()
			if err != nil {
				continue
			}
			apply(msg, meta)
			if initial > 0 {
				if initial--; initial == 0 || meta.NumPending == 0 {
					initial = 0
					loaded()
				}
			}
		}
	})
}

// operation is what a message of a bucket's stream did to its key, as KV
// tells it.
func operation(msg jetstream.Msg) jetstream.KeyValueOp {
	h := msg.Headers()
	switch {
	case h == nil:
	case h.Get("KV-Operation") == "DEL":
		return jetstream.KeyValueDelete
	case h.Get("KV-Operation") == "PURGE":
		return jetstream.KeyValuePurge
	case h.Get("KV-Operation") == "":
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			return jetstream.KeyValuePurge
		case "Remove":
			return jetstream.KeyValueDelete
		}
	}
	return jetstream.KeyValuePut
}

// entry is one message of a bucket's stream as a KeyValueEntry.
type entry struct {
	bucket, key string
	value       []byte
	meta        *jetstream.MsgMetadata
	op          jetstream.KeyValueOp
}

func (e *entry) Bucket() string                  { return e.bucket }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.meta.Sequence.Stream }
func (e *entry) Created() time.Time              { return e.meta.Timestamp }
func (e *entry) Delta() uint64                   { return e.meta.NumPending }
func (e *entry) Operation() jetstream.KeyValueOp { return e.op }

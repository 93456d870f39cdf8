package bus

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/consumer"
)

// followBucket keeps a process's view of every key of kv until ctx ends.
// Each life of it (consumer.RunRestarting: again after a failure) opens a
// watch and asks start for a fresh view: apply takes every entry, first
// those of the bucket as it was, until loaded is called once they are
// all in, then every change. unsync ends a life: the view is not to be
// trusted until the next one has loaded.
func followBucket(ctx context.Context, log *slog.Logger, name string, kv jetstream.KeyValue, unsync func(),
	start func() (apply func(jetstream.KeyValueEntry), loaded func())) error {
	defer unsync()
	return consumer.RunRestarting(ctx, log, name, func(ctx context.Context) error {
		defer unsync()
		w, err := kv.WatchAll(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop() }()
		apply, loaded := start()
		for {
			select {
			case <-ctx.Done():
				return nil
			case kve, ok := <-w.Updates():
				switch {
				case !ok:
					return fmt.Errorf("%s: watch ended", name)
				case kve == nil: // the bucket as it was: read
					loaded()
				default:
					apply(kve)
				}
			}
		}
	})
}

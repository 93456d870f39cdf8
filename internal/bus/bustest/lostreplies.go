package bustest

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// LostReplies is a bucket with the answer to some writes lost
// on the way back, as when a stream leader dies after storing a write and
// before acknowledging it: the write is done, then before returns, and
// the writer hears only that its deadline passed.
type LostReplies struct {
	jetstream.KeyValue
	Stored bool                            // whether the write is done before its answer is lost
	Before func(ctx context.Context) error // run after the lost write; nil: none
	Lost   int                             // how many answers are still to be lost
}

func (kv *LostReplies) lose(ctx context.Context, write func() (uint64, error)) (uint64, error) {
	if kv.Lost == 0 {
		return write()
	}
	kv.Lost--
	if kv.Stored {
		if _, err := write(); err != nil {
			return 0, err
		}
	}
	if kv.Before != nil {
		if err := kv.Before(ctx); err != nil {
			return 0, err
		}
	}
	return 0, context.DeadlineExceeded
}

func (kv *LostReplies) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return kv.lose(ctx, func() (uint64, error) { return kv.KeyValue.Create(ctx, key, value, opts...) })
}

func (kv *LostReplies) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return kv.lose(ctx, func() (uint64, error) { return kv.KeyValue.Update(ctx, key, value, rev) })
}

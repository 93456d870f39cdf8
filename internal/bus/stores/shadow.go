package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// shadowKey is where the policies bucket keeps the shadow policy: a
// candidate every submit is also evaluated against, enforcing nothing.
const shadowKey = "shadow"

// GetShadow returns the shadow policy and its revision; with none set,
// nil at revision 0.
func (s *PolicyStore) GetShadow(ctx context.Context) (*policy.Document, uint64, error) {
	kve, err := jsio.Get(ctx, s.kv, shadowKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	} else if err != nil {
		return nil, 0, err
	}
	doc, err := policy.ParseStored(kve.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("stored shadow policy (revision %d): %w", kve.Revision(), err)
	}
	return doc, kve.Revision(), nil
}

// SetShadow validates doc and stores it as the shadow policy, returning
// its revision. An invalid document is refused and the stored shadow is
// left as it was.
func (s *PolicyStore) SetShadow(ctx context.Context, doc *policy.Document) (uint64, error) {
	data, err := marshalValid(doc)
	if err != nil {
		return 0, err
	}
	return s.kv.Put(ctx, shadowKey, data)
}

// ClearShadow drops the shadow policy stored at revision (0: whatever is
// stored). A shadow stored since at another revision is left, and the
// error wraps machine.ErrConflict.
func (s *PolicyStore) ClearShadow(ctx context.Context, revision uint64) error {
	var opts []jetstream.KVDeleteOpt
	if revision != 0 {
		opts = append(opts, jetstream.LastRevision(revision))
	}
	err := s.kv.Delete(ctx, shadowKey, opts...)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: the shadow policy was set again since revision %d: %v", machine.ErrConflict, revision, err)
	}
	return err
}

// FollowShadow calls set with the shadow policy whenever it changes, and
// once with the one stored when it starts (nil: none set), until ctx
// ends. A stored shadow that does not load is logged and passed over.
func (s *PolicyStore) FollowShadow(ctx context.Context, set func(doc *policy.Document, revision uint64), log *slog.Logger) error {
	return s.follow(ctx, shadowKey, "shadow policy", log, set)
}

// ShadowLog is TOOL_SHADOW: what the processes that serve submits
// compared against the shadow policy, one wire.ShadowTally per process
// and moment, kept wire.ShadowMaxAgeMs, at most wire.ShadowMaxTallies of them.
type ShadowLog struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// NewShadowLog returns the log over the provisioned stream.
func NewShadowLog(js jetstream.JetStream, stream jetstream.Stream) *ShadowLog {
	return &ShadowLog{js: js, stream: stream}
}

// Append records one tally.
func (l *ShadowLog) Append(ctx context.Context, t wire.ShadowTally) error {
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (*jetstream.PubAck, error) {
		return l.js.PublishMsg(ctx, &nats.Msg{Subject: wire.ShadowSubject, Data: data}, jetstream.WithExpectStream(wire.ShadowStream))
	})
	return err
}

// Since returns the tallies recorded from t on (the zero t: all of
// them), oldest first, up to the stream's end as it was when the read
// began. A tally that does not decode is passed over.
func (l *ShadowLog) Since(ctx context.Context, t time.Time) ([]wire.ShadowTally, error) {
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !t.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	return readAll[wire.ShadowTally](ctx, l.stream, cfg)
}

// readAll reads what cfg delivers of stream, oldest first, up to the
// stream's end as it was when the read began, through a consumer of its
// own that it deletes. A message that does not decode as a T is passed
// over.
func readAll[T any](ctx context.Context, stream jetstream.Stream, cfg jetstream.ConsumerConfig) ([]T, error) {
	name := stream.CachedInfo().Config.Name
	cfg.AckPolicy, cfg.MemoryStorage, cfg.InactiveThreshold = jetstream.AckNonePolicy, true, time.Minute
	cons, err := jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (jetstream.Consumer, error) { return stream.CreateConsumer(ctx, cfg) })
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stream.DeleteConsumer(ctx, cons.CachedInfo().Name)
	}()
	left := cons.CachedInfo().NumPending
	out := make([]T, 0, left)
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			var v T
			if json.Unmarshal(msg.Data(), &v) == nil {
				out = append(out, v)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if n == 0 {
			break // the rest aged out while being read
		}
		left -= uint64(n)
	}
	return out, nil
}

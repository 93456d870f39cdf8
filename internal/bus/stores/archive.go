package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Archive keeps the finished calls that left tool_calls, in the stream
// TOOL_ARCHIVE: one message per call, on wire.ArchiveSubject(pendingId),
// so a call is read by id with one direct lookup and a conversation's by
// subject filter, and a time range from the stream's start time.
type Archive struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// NewArchive returns the archive over the provisioned stream.
func NewArchive(js jetstream.JetStream, stream jetstream.Stream) *Archive {
	return &Archive{js: js, stream: stream}
}

// Put archives a call. Archiving the same revision again is a duplicate
// the stream drops (or, past its window, a copy that replaces the first:
// the stream keeps one message per call).
func (a *Archive) Put(ctx context.Context, c wire.ArchivedCall) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (*jetstream.PubAck, error) {
		return a.js.PublishMsg(ctx, &nats.Msg{Subject: wire.ArchiveSubject(c.Entry.PendingID), Data: data},
			jetstream.WithMsgID(fmt.Sprintf("%s:archive", wire.MsgID(c.Entry.PendingID, c.Revision))), jetstream.WithExpectStream(wire.ArchiveStream))
	})
	return err
}

// Get returns one archived call, machine.ErrNotFound if it is not there.
func (a *Archive) Get(ctx context.Context, pendingID string) (*wire.ArchivedCall, error) {
	if !machine.ValidPendingID(pendingID) {
		return nil, fmt.Errorf("%w: pendingId %q is not a toolgate id", machine.ErrNotFound, pendingID)
	}
	// In attempts, as the store's reads: a request to a leader that just
	// died is never answered, and every submit that names its toolCallId
	// asks the archive first.
	msg, err := jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return a.stream.GetLastMsgForSubject(ctx, wire.ArchiveSubject(pendingID))
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("pendingId %s: %w", pendingID, machine.ErrNotFound)
	} else if err != nil {
		return nil, err
	}
	return decodeArchived(msg.Data)
}

// ListConversation returns a conversation's archived calls.
func (a *Archive) ListConversation(ctx context.Context, conversationID string) ([]*wire.ArchivedCall, error) {
	return a.read(ctx, jetstream.ConsumerConfig{
		FilterSubjects: []string{wire.ArchiveSubject(machine.ConversationKey(conversationID) + ".*")},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
}

// Since returns the calls archived from t on: every call requested from
// t on that was archived, and some requested before.
func (a *Archive) Since(ctx context.Context, t time.Time) ([]*wire.ArchivedCall, error) {
	return a.read(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t})
}

// read reads what cfg selects, up to the stream's end as it was when the
// read began, through a consumer of its own that it deletes after.
func (a *Archive) read(ctx context.Context, cfg jetstream.ConsumerConfig) ([]*wire.ArchivedCall, error) {
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage = true
	cfg.InactiveThreshold = time.Minute // gone even if this process dies first
	cons, err := jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (jetstream.Consumer, error) { return a.stream.CreateConsumer(ctx, cfg) })
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", wire.ArchiveStream, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = a.stream.DeleteConsumer(ctx, cons.CachedInfo().Name)
	}()
	left := cons.CachedInfo().NumPending
	out := make([]*wire.ArchivedCall, 0, left)
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", wire.ArchiveStream, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			if c, err := decodeArchived(msg.Data()); err == nil {
				out = append(out, c)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read %s: %w", wire.ArchiveStream, err)
		}
		if n == 0 {
			break // the rest aged out (--archive-max-age) while being read
		}
		left -= uint64(n)
	}
	return out, nil
}

func decodeArchived(data []byte) (*wire.ArchivedCall, error) {
	var c wire.ArchivedCall
	if err := json.Unmarshal(data, &c); err != nil || c.Entry == nil {
		return nil, fmt.Errorf("%s: undecodable archived call: %v", wire.ArchiveStream, err)
	}
	return &c, nil
}

package views

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// pageLinger is how long a page waits for more events once it has one:
// a burst comes back in one page, not one page an event.
const pageLinger = 20 * time.Millisecond

// pageRead bounds the read of a page of events the stream holds already.
const pageRead = 10 * time.Second

// Page reads up to limit events of TOOL_EVENTS in order, with an ordered
// consumer of its own (the feed need not run): from sequence from, or
// when from is 0 those published from since on, or with since zero too
// those to come. A page of events the stream holds is read at once; with
// none, it waits up to wait for the first. It returns what it read (none
// when wait passed) with the sequence to ask from next.
func (f *EventsFeed) Page(ctx context.Context, from uint64, since time.Time, limit int, wait time.Duration) ([]wire.StreamEvent, uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	switch {
	case from > 0:
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	case !since.IsZero():
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}
	}
	if from == 0 {
		last, err := f.LastSeq(ctx)
		if err != nil {
			return nil, 0, err
		}
		from = last + 1 // what is asked next when nothing comes
	}
	cons, err := f.js.OrderedConsumer(ctx, wire.EventsStream, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("consumer on %s: %w", wire.EventsStream, err)
	}
	// Events already there are read whatever the wait (up to pageRead);
	// only a page with none waits, for wait, for the first to come.
	want := limit
	if info := cons.CachedInfo(); info != nil && info.NumPending > 0 {
		want = int(min(info.NumPending, uint64(limit)))
		wait = pageRead
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var mu sync.Mutex
	var page []wire.StreamEvent
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(page) == want {
			return
		}
		page = append(page, wire.StreamEvent{Seq: meta.Sequence.Stream, Subject: m.Subject(), Event: m.Data()})
		switch {
		case len(page) == want:
			cancel()
		case len(page) == 1 && wait != pageRead:
			time.AfterFunc(pageLinger, cancel) // a burst to come, in one page
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("consume %s: %w", wire.EventsStream, err)
	}
	<-ctx.Done()
	cc.Stop()
	mu.Lock()
	defer mu.Unlock()
	if n := len(page); n > 0 {
		from = page[n-1].Seq + 1
	}
	return page, from, nil
}

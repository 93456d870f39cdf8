package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// keepAlive is how often an idle event stream sends a comment, so proxies
// and browsers keep it open and a dead client is noticed.
const keepAlive = 15 * time.Second

// events streams every transition as server-sent events: id is the
// TOOL_EVENTS sequence, event the subject, data the envelope. A client that
// reconnects with Last-Event-ID (or ?since=SEQ, e.g. a list's eventsSeq)
// gets everything after it, so it misses nothing.
func (s *Server) events(w http.ResponseWriter, r *http.Request, u User) error {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return fmt.Errorf("streaming unsupported")
	}
	q := r.URL.Query()
	conv, tool := q.Get("conversationId"), q.Get("toolName")
	// An agent hears of its own calls only, as on NATS.
	caller := ""
	if !u.SeesAll() {
		caller = u.Name
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	if since := cmp.Or(r.Header.Get("Last-Event-ID"), q.Get("since")); since != "" {
		seq, err := strconv.ParseUint(since, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: Last-Event-ID/since: want a sequence number, got %q", machine.ErrInvalid, since)
		}
		last, err := s.eventsSeq(r.Context())
		if err != nil {
			return err
		}
		if seq > last {
			return fmt.Errorf("%w: Last-Event-ID/since: %d is past the last event, %d", machine.ErrInvalid, seq, last)
		}
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1}
	}
	ctx := r.Context()
	cons, err := s.cfg.JS.OrderedConsumer(ctx, wire.EventsStream, cfg)
	if err != nil {
		return err
	}
	msgs := make(chan jetstream.Msg, 256)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()

	// A stream lasts as long as its client listens: no server deadline.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": toolgate events\n\n")
	flusher.Flush()

	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		case m := <-msgs:
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if conv != "" || tool != "" || caller != "" {
				var ev struct {
					Entry struct {
						ConversationID string `json:"conversationId"`
						ToolName       string `json:"toolName"`
						CallerBotID    string `json:"callerBotId"`
					} `json:"entry"`
				}
				if json.Unmarshal(m.Data(), &ev) != nil ||
					(conv != "" && ev.Entry.ConversationID != conv) || (tool != "" && ev.Entry.ToolName != tool) ||
					(caller != "" && ev.Entry.CallerBotID != caller) {
					continue
				}
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", meta.Sequence.Stream, m.Subject(), m.Data())
			// Flush only when nothing else is waiting: a burst goes out
			// in one write.
			if len(msgs) == 0 {
				flusher.Flush()
			}
		}
	}
}

package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/machine"
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
	var from uint64 // 0: the events to come
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
		from = seq + 1
	}
	ctx, cancel := context.WithCancel(r.Context())
	msgs := make(chan event, 256)
	started, done := make(chan struct{}), make(chan struct{})
	var followErr error
	go func() {
		defer close(done)
		followErr = s.cfg.Events.Follow(ctx, from, func() { close(started) }, func(seq uint64, subject string, data []byte) {
			select {
			case msgs <- event{seq, subject, data}:
			case <-ctx.Done():
			}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case <-started:
	case <-done:
		return followErr
	}

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
	unflushed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			// Ended with the client still there: it reconnects with
			// Last-Event-ID and misses nothing.
			s.cfg.Log.Warn("event stream ended", "err", followErr)
			return nil
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		case m := <-msgs:
			if shown(m.data, conv, tool, caller) {
				fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", m.seq, m.subject, m.data)
				unflushed = true
			}
			// Flush only when nothing else is waiting: a burst goes out
			// in one write, even one whose last events this stream
			// leaves out (they once held the rest back until the next
			// keep-alive).
			if unflushed && len(msgs) == 0 {
				flusher.Flush()
				unflushed = false
			}
		}
	}
}

// shown reports whether a stream asking for conv's, tool's and caller's
// events (each "" for any) shows the event data.
func shown(data []byte, conv, tool, caller string) bool {
	if conv == "" && tool == "" && caller == "" {
		return true
	}
	var ev struct {
		Entry struct {
			ConversationID string `json:"conversationId"`
			ToolName       string `json:"toolName"`
			CallerBotID    string `json:"callerBotId"`
		} `json:"entry"`
	}
	return json.Unmarshal(data, &ev) == nil &&
		(conv == "" || ev.Entry.ConversationID == conv) && (tool == "" || ev.Entry.ToolName == tool) &&
		(caller == "" || ev.Entry.CallerBotID == caller)
}

// event is one event of TOOL_EVENTS on its way to a client.
type event struct {
	seq     uint64
	subject string
	data    []byte
}

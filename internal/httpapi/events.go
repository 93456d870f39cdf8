package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// keepAlive is how often an idle event stream sends a comment, so proxies
// and browsers keep it open and a dead client is noticed.
const keepAlive = 15 * time.Second

// maxEventID bounds Last-Event-ID and ?since=: a TOOL_EVENTS sequence has
// at most 20 digits.
const maxEventID = 20

// ResetEvent is the data of the event, named "reset", that starts a stream
// asked to resume after a sequence past TOOL_EVENTS' end (the stream was
// recreated, or the id is another toolgate's): the stream resumes after
// the end instead, and says so.
type ResetEvent struct {
	// LastEventID is the sequence the client asked to resume after.
	LastEventID uint64 `json:"lastEventId"`
	// ResumedAfter is the last sequence of TOOL_EVENTS when the stream
	// started: the events that follow come after it. It is the reset
	// event's id too, so a client that reconnects resumes from there.
	ResumedAfter uint64 `json:"resumedAfter"`
	Reason       string `json:"reason"`
}

// resumeFrom reads where a stream resumes: the sequence in Last-Event-ID,
// else in ?since=, 0 when neither is given (the events to come). It
// refuses what no stream could have sent, naming the field: not a number,
// or longer than a sequence may be.
func resumeFrom(r *http.Request) (seq uint64, field string, given bool, err error) {
	field, v := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if v == "" {
		field, v = "since", r.URL.Query().Get("since")
	}
	if v == "" {
		return 0, "", false, nil
	}
	if len(v) > maxEventID {
		return 0, field, true, fmt.Errorf("%w: %s: want a TOOL_EVENTS sequence number, at most %d digits; got %d characters", machine.ErrInvalid, field, maxEventID, len(v))
	}
	seq, err = strconv.ParseUint(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, field, true, fmt.Errorf("%w: %s: %s is past the largest sequence number, %d", machine.ErrInvalid, field, v, uint64(math.MaxUint64))
	}
	if err != nil {
		return 0, field, true, fmt.Errorf("%w: %s: want a TOOL_EVENTS sequence number, got %q", machine.ErrInvalid, field, v)
	}
	return seq, field, true, nil
}

// events streams every transition as server-sent events: id is the
// TOOL_EVENTS sequence, event the subject, data the envelope. A client that
// reconnects with Last-Event-ID (or ?since=SEQ, e.g. a list's eventsSeq)
// gets everything after it, so it misses nothing. A sequence past the
// stream's end (the stream was recreated, or the id is another
// toolgate's) resumes after the end, and the stream starts with a "reset"
// event saying so (ResetEvent): an EventSource takes an error answer as
// final and would never reconnect.
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
	var reset *ResetEvent
	seq, field, given, err := resumeFrom(r)
	if err != nil {
		return err
	}
	if given {
		last, err := s.cfg.Events.LastSeq(r.Context())
		if err != nil {
			return err
		}
		if seq > last {
			reset = &ResetEvent{LastEventID: seq, ResumedAfter: last, Reason: fmt.Sprintf(
				"%s %d is past the last event of TOOL_EVENTS, %d (the stream was recreated, or the id is another toolgate's): "+
					"resuming after %d; list the calls (GET /v1/tool-calls) for what happened before", field, seq, last, last)}
			seq = last
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
	if reset != nil {
		data, _ := json.Marshal(reset)
		fmt.Fprintf(w, "id: %d\nevent: reset\ndata: %s\n\n", reset.ResumedAfter, data)
	}
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

package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/wire"
)

// rawEvent is one server-sent event as it came, its data unread.
type rawEvent struct{ id, event, data string }

// openEvents opens /v1/events as the viewer, with lastID as its
// Last-Event-ID header when not "", and returns the status and, on a 200,
// a reader of its events (else the body).
func openEvents(t *testing.T, h *harness, query, lastID string) (int, func() rawEvent, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", h.url+"/v1/events"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer viewer-token-00000001")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		var body strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			body.WriteString(sc.Text())
		}
		return resp.StatusCode, nil, body.String()
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	return resp.StatusCode, func() rawEvent {
		t.Helper()
		var ev rawEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.event != "":
				return ev
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
		t.Fatalf("event stream ended: %v", sc.Err())
		return ev
	}, ""
}

// eventsSeq waits until TOOL_EVENTS holds at least n events (a submit's
// event is published after it answers) and returns its last sequence.
func eventsSeq(t *testing.T, h *harness, n uint64) uint64 {
	t.Helper()
	var page wire.ListPage
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the events are in TOOL_EVENTS", func() (bool, any) {
		status := h.do("GET", "/v1/tool-calls?limit=1", "viewer-token-00000001", nil, &page)
		return status == http.StatusOK && page.EventsSeq >= n, page.EventsSeq
	})
	return page.EventsSeq
}

// An id past the stream's end (the stream was recreated, or the id is
// another install's) resumes after the end, first saying so: an
// EventSource takes an error answer as final and never reconnects.
func TestEvents_AnIDPastTheEndResumesAfterTheEnd(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	h.submit("reset-before", "c1")
	last := eventsSeq(t, h, 1)

	for _, c := range []struct{ name, query, lastID, field string }{
		{"Last-Event-ID", "", fmt.Sprint(last + 1000), "Last-Event-ID"},
		{"since", fmt.Sprintf("?since=%d", last+1000), "", "since"},
		{"the largest sequence", "", "18446744073709551615", "Last-Event-ID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			status, next, body := openEvents(t, h, c.query, c.lastID)
			require.Equal(t, http.StatusOK, status, body)
			reset := next()
			assert.Equal(t, "reset", reset.event)
			var data httpapi.ResetEvent
			require.NoError(t, json.Unmarshal([]byte(reset.data), &data), reset.data)
			assert.Equal(t, fmt.Sprint(data.ResumedAfter), reset.id, "a client that reconnects resumes after the reset")
			assert.GreaterOrEqual(t, data.ResumedAfter, last)
			assert.Contains(t, data.Reason, c.field+" ")
			assert.Contains(t, data.Reason, "past the last event")

			// What happens next comes next, and nothing before the reset.
			e := h.submit("reset-after-"+strings.ReplaceAll(c.name, " ", "-"), "c1")
			for {
				ev := next()
				var got wire.Event
				require.NoError(t, json.Unmarshal([]byte(ev.data), &got), ev.data)
				assert.NotEqual(t, "reset-before", got.Entry.ConversationID, "an event from before the reset")
				if got.Entry.PendingID == e.PendingID {
					assert.Equal(t, "tool.approval_required", ev.event)
					break
				}
			}
		})
	}
}

// What no stream could have sent is refused, naming the field: the client
// is wrong, and reconnecting would not help.
func TestEvents_RefusesAnIDNoStreamSends(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	for _, c := range []struct{ query, lastID, want string }{
		{"?since=soon", "", `since: want a TOOL_EVENTS sequence number, got "soon"`},
		{"", "-1", `Last-Event-ID: want a TOOL_EVENTS sequence number, got "-1"`},
		{"", "tool.approval_required", `Last-Event-ID: want a TOOL_EVENTS sequence number`},
		{"", "18446744073709551616", "Last-Event-ID: 18446744073709551616 is past the largest sequence number"},
		{"", strings.Repeat("9", 21), "Last-Event-ID: want a TOOL_EVENTS sequence number, at most 20 digits; got 21 characters"},
		{"?since=" + strings.Repeat("1", 5000), "", "since: "},
	} {
		status, _, body := openEvents(t, h, c.query, c.lastID)
		assert.Equal(t, http.StatusBadRequest, status, "%s %s", c.query, c.lastID)
		var refused httpapi.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(body), &refused), body)
		assert.Contains(t, refused.Error.Message, c.want, "%s %s", c.query, c.lastID)
	}
}

// An id within the stream resumes after it, as ever, with no reset.
func TestEvents_AnIDWithinTheStreamResumesAfterIt(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	first := h.submit("resume", "c1")
	seq := eventsSeq(t, h, 1)
	second := h.submit("resume", "c2")
	status, next, body := openEvents(t, h, "", fmt.Sprint(seq))
	require.Equal(t, http.StatusOK, status, body)
	ev := next()
	require.Equal(t, "tool.approval_required", ev.event, "no reset")
	var got wire.Event
	require.NoError(t, json.Unmarshal([]byte(ev.data), &got))
	assert.Equal(t, second.PendingID, got.Entry.PendingID, "the first event after the id, not %s", first.PendingID)
}

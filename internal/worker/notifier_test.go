package worker_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	tgpolicy "github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// ntWait is how long a notifier test waits for something that takes
// milliseconds; generous for -race on a busy machine.
const ntWait = 15 * time.Second

// ntFast are options that make retries take milliseconds.
func ntFast(attempts int) []worker.NotifierOption {
	return []worker.NotifierOption{
		worker.WithDeliveryBackoff(10*time.Millisecond, 20*time.Millisecond),
		worker.WithDeliveryAttempts(attempts),
		worker.WithHTTPTimeout(5 * time.Second),
	}
}

// ntEnv starts a server and the relay, and returns a machine that asks
// about every call, with the engine built from doc (YAML).
func ntEnv(t *testing.T, doc string) (*bustest.Env, *tgpolicy.Engine, *machine.Machine) {
	t.Helper()
	env := bustest.Start(t, bustest.Topology{Name: "single", Replicas: 1})
	bustest.RunRelay(t, env.JS)
	d, err := tgpolicy.Parse([]byte(doc))
	require.NoError(t, err)
	engine, err := tgpolicy.NewEngine(d, nil, nil)
	require.NoError(t, err)
	return env, engine, machine.New(env.Store, machine.WithEvaluator(engine))
}

// ntCounts is a NotificationCounter that remembers.
type ntCounts struct {
	mu sync.Mutex
	n  map[string]int // "channel/result"
}

func (c *ntCounts) Notification(channel, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[channel+"/"+result]++
}

func (c *ntCounts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

var _ worker.NotificationCounter = (*ntCounts)(nil)

// ntStart runs a Notifier until the test ends, and returns once its
// consumer on TOOL_EVENTS exists: it starts at the stream's end, so a call
// submitted before would not be told of.
func ntStart(t *testing.T, env *bustest.Env, engine *tgpolicy.Engine, counter worker.NotificationCounter, opts ...worker.NotifierOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.NewNotifier(env.Conn, engine, counter, bustest.Logger(), opts...).Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "notifier stops cleanly")
			case <-time.After(ntWait):
				t.Error("notifier did not stop after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "the notifier's consumer appeared", func() (bool, any) {
		_, err := env.JS.Consumer(t.Context(), wire.EventsStream, worker.NotifierDurable)
		return err == nil, err
	})
	return stop
}

// ntRequest is one request a receiver got.
type ntRequest struct {
	Path   string
	Header http.Header
	Body   []byte
}

// ntReceiver is an HTTP endpoint that records every request and answers
// with what status says (200 when it is nil).
type ntReceiver struct {
	*httptest.Server
	got    chan ntRequest
	mu     sync.Mutex
	all    []ntRequest
	status func(n int, r ntRequest) int
}

func ntListen(t *testing.T, status func(n int, r ntRequest) int) *ntReceiver {
	rc := &ntReceiver{got: make(chan ntRequest, 1000), status: status}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := ntRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		rc.mu.Lock()
		rc.all = append(rc.all, req)
		n := len(rc.all)
		rc.mu.Unlock()
		code := http.StatusOK
		if rc.status != nil {
			code = rc.status(n, req)
		}
		w.WriteHeader(code)
		if code == http.StatusOK {
			rc.got <- req
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *ntReceiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.all)
}

// next waits for the next request the receiver accepted.
func (rc *ntReceiver) next(t *testing.T, what string) ntRequest {
	t.Helper()
	select {
	case r := <-rc.got:
		return r
	case <-time.After(ntWait):
		t.Fatalf("%s: nothing arrived", what)
		return ntRequest{}
	}
}

func ntSubmit(t *testing.T, m *machine.Machine, c machine.Call) *machine.Entry {
	t.Helper()
	if c.ToolName == "" {
		c.ToolName = "send_email"
	}
	if c.CallerBotID == "" {
		c.CallerBotID = "bot-7"
	}
	if c.ConversationID == "" {
		c.ConversationID = "conv-1"
	}
	if len(c.Arguments) == 0 {
		c.Arguments = json.RawMessage(`{"to":"cfo@example.com"}`)
	}
	e, err := m.Submit(t.Context(), c)
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)
	return e
}

// ntEventID is the id of the event that created e.
func ntEventID(t *testing.T, env *bustest.Env, e *machine.Entry) string {
	t.Helper()
	_, rev, err := env.Store.Get(t.Context(), e.PendingID)
	require.NoError(t, err)
	return fmt.Sprintf("%s:%d", e.PendingID, rev)
}

func TestNotifier_WebhookRetriedUntilDeliveredSigned(t *testing.T) {
	hook := ntListen(t, func(n int, _ ntRequest) int {
		if n <= 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  notify:
    - {type: webhook, url: %q, secret: "s3cr3t"}
`, hook.URL+"/toolgate"))
	counts := &ntCounts{}
	ntStart(t, env, engine, counts, ntFast(5)...)

	e := ntSubmit(t, m, machine.Call{})
	got := hook.next(t, "the fourth attempt")
	require.Equal(t, 4, hook.count(), "three failures, then the delivery")

	// The signature, checked from scratch: Standard Webhooks' base64
	// HMAC-SHA256 of id.timestamp.body, keyed with the secret's bytes (it
	// is no whsec_ one).
	id, ts := got.Header.Get(worker.HeaderWebhookID), got.Header.Get(worker.HeaderWebhookTimestamp)
	require.NotEmpty(t, ts)
	mac := hmac.New(sha256.New, []byte("s3cr3t"))
	mac.Write([]byte(id + "." + ts + "." + string(got.Body)))
	assert.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), got.Header.Get(worker.HeaderWebhookSignature))

	// The body is the event as published.
	var ev wire.Event
	require.NoError(t, json.Unmarshal(got.Body, &ev))
	assert.Equal(t, wire.SubjectApprovalRequired, ev.Type)
	assert.Equal(t, e.PendingID, ev.Entry.PendingID)
	assert.Equal(t, "/toolgate", got.Path)
	assert.Equal(t, "application/json", got.Header.Get("Content-Type"))
	assert.Equal(t, wire.SubjectApprovalRequired, got.Header.Get(worker.HeaderEvent))
	assert.Equal(t, ntEventID(t, env, e), ev.ID)
	hook.mu.Lock()
	for i, r := range hook.all {
		assert.Equal(t, ev.ID, r.Header.Get(worker.HeaderWebhookID), "attempt %d: the same webhook-id every time", i+1)
		assert.Equal(t, ev.ID, r.Header.Get(worker.HeaderDelivery), "attempt %d", i+1)
	}
	hook.mu.Unlock()
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "webhook/sent at 1", func() (bool, any) { got := counts.get("webhook/sent"); return got == 1, got })
	assert.Equal(t, 3, counts.get("webhook/failed"))
}

func TestNotifier_DeadWebhookIsDeadLetteredAndDoesNotHoldUpSlack(t *testing.T) {
	slackGot := make(chan struct{})
	var slackOnce sync.Once
	slack := ntListen(t, func(int, ntRequest) int {
		slackOnce.Do(func() { close(slackGot) })
		return http.StatusOK
	})
	// The dead webhook's first attempt waits for Slack's message: if Slack
	// had to wait for this channel, neither would ever finish, and the
	// webhook would notice after ntWait.
	var blockedTooLong bool
	var mu sync.Mutex
	dead := ntListen(t, func(n int, _ ntRequest) int {
		if n == 1 {
			select {
			case <-slackGot:
			case <-time.After(ntWait):
				mu.Lock()
				blockedTooLong = true
				mu.Unlock()
			}
		}
		return http.StatusInternalServerError
	})
	// A closed port: connection refused on every attempt.
	closedURL := fmt.Sprintf("http://127.0.0.1:%d/hook/secret-path", bustest.FreePort(t))

	deadURL := dead.URL + "/hook/secret-path"
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  notify:
    - {type: webhook, url: %q, secret: a}
    - {type: webhook, url: %q, secret: b}
    - {type: slack, url: %q}
`, deadURL, closedURL, slack.URL+"/services/T/B/X"))
	counts := &ntCounts{}
	ntStart(t, env, engine, counts, worker.WithDeliveryBackoff(10*time.Millisecond), worker.WithDeliveryAttempts(3),
		worker.WithHTTPTimeout(2*ntWait))

	e := ntSubmit(t, m, machine.Call{})
	slack.next(t, "slack")
	id := ntEventID(t, env, e)

	// Both webhooks end in the dead-letter stream, three attempts each.
	dlq := map[string]jetstream.Msg{}
	cons, err := env.JS.OrderedConsumer(t.Context(), wire.DeadLetterStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.DeadLetterSubject(worker.NotifierDurable)},
	})
	require.NoError(t, err)
	for len(dlq) < 2 {
		msg, err := cons.Next(jetstream.FetchMaxWait(ntWait))
		require.NoError(t, err, "dead letters so far: %d", len(dlq))
		dlq[msg.Headers().Get(worker.HeaderChannel)] = msg
	}
	mu.Lock()
	assert.False(t, blockedTooLong, "Slack's message waited for the dead webhook")
	mu.Unlock()

	for _, c := range []struct{ url, wantErr string }{
		{deadURL, "500 Internal Server Error"},
		{closedURL, "refused"},
	} {
		key := worker.ChannelKey(tgpolicy.Channel{Type: tgpolicy.ChannelWebhook, URL: c.url})
		msg, ok := dlq[key]
		require.True(t, ok, "no dead letter for %s", c.url)
		h := msg.Headers()
		assert.Equal(t, id, h.Get(worker.HeaderEventID))
		assert.Equal(t, "3", h.Get(consumer.HeaderDeadDeliveries))
		assert.Equal(t, "notifier-"+key, h.Get(consumer.HeaderDeadConsumer))
		assert.Equal(t, worker.NotifySubject(key), h.Get(consumer.HeaderDeadSubject))
		assert.Contains(t, h.Get(consumer.HeaderDeadError), c.wantErr)
		assert.NotContains(t, h.Get(consumer.HeaderDeadError), "secret-path", "the URL's path is not repeated: it may be the secret")
		assert.Equal(t, strings.TrimSuffix(c.url, "/hook/secret-path")+"/…", h.Get(worker.HeaderChannelHost))
		var ev wire.Event
		require.NoError(t, json.Unmarshal(msg.Data(), &ev), "the dead letter carries the event")
		assert.Equal(t, e.PendingID, ev.Entry.PendingID)
	}
	assert.Equal(t, 3, dead.count())
	assert.Equal(t, 1, slack.count())
	assert.Equal(t, 6, counts.get("webhook/failed"))
	assert.Equal(t, 1, counts.get("slack/sent"))
}

const ntCardPolicy = `default:
  approvalTimeoutMs: 600000
  describe:
    send_email: 'Email {{.to}} about "{{.subject}}"'
  inboxUrl: "%s"
  notify:
    - {type: slack, url: "%s/services/T/B/X"}
    - {type: ntfy, url: "%s/", topic: team-approvals, secret: tk_token}
`

func TestNotifier_SlackAndNtfyCarryTheCall(t *testing.T) {
	slack := ntListen(t, nil)
	ntfy := ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf(ntCardPolicy, "https://toolgate.example/", slack.URL, ntfy.URL))
	ntStart(t, env, engine, nil, ntFast(3)...)

	e := ntSubmit(t, m, machine.Call{
		Arguments:      json.RawMessage(`{"to":"cfo@example.com","subject":"Q3 <numbers> & more"}`),
		CallerBotID:    "bot-7",
		ConversationID: "conv-42",
		Team:           "finance",
		EstimatedCost:  0.25,
	})
	description := `Email cfo@example.com about "Q3 <numbers> & more"`
	require.Equal(t, description, e.Description)
	link := "https://toolgate.example/#/calls/" + e.PendingID
	approve, reject := link+"?decision=approve", link+"?decision=reject"
	deadline := time.UnixMilli(e.ApprovalTimeoutAt).UTC().Format("2006-01-02 15:04:05 UTC")

	t.Run("slack", func(t *testing.T) {
		got := slack.next(t, "slack card")
		assert.Equal(t, "/services/T/B/X", got.Path)
		var msg struct {
			Text   string `json:"text"`
			Blocks []struct {
				Type string `json:"type"`
				Text *struct {
					Type, Text string
				} `json:"text"`
				Fields []struct {
					Type, Text string
				} `json:"fields"`
				Elements []struct {
					Type  string `json:"type"`
					Text  struct{ Text string }
					URL   string `json:"url"`
					Style string `json:"style"`
				} `json:"elements"`
			} `json:"blocks"`
		}
		require.NoError(t, json.Unmarshal(got.Body, &msg), "%s", got.Body)
		// The fallback text says it all.
		for _, want := range []string{"send_email", description, "bot-7", "conv-42", "0.25", deadline, approve, reject} {
			assert.Contains(t, msg.Text, want)
		}
		require.Len(t, msg.Blocks, 4, "%s", got.Body)
		assert.Equal(t, "header", msg.Blocks[0].Type)
		assert.Equal(t, "Approval needed: send_email", msg.Blocks[0].Text.Text)
		assert.Equal(t, "Email cfo@example.com about \"Q3 &lt;numbers&gt; &amp; more\"", msg.Blocks[1].Text.Text, "mrkdwn escaped")
		var fields []string
		for _, f := range msg.Blocks[2].Fields {
			fields = append(fields, f.Text)
		}
		assert.Equal(t, []string{
			"*Tool*\n`send_email`", "*Caller*\nbot-7", "*Conversation*\nconv-42", "*Estimated cost*\n0.25",
			fmt.Sprintf("*Deadline*\n<!date^%d^{date_short_pretty} {time}|%s>", e.ApprovalTimeoutAt/1000, deadline),
			"*Team*\nfinance",
		}, fields)
		require.Len(t, msg.Blocks[3].Elements, 2)
		assert.Equal(t, "Approve", msg.Blocks[3].Elements[0].Text.Text)
		assert.Equal(t, approve, msg.Blocks[3].Elements[0].URL)
		assert.Equal(t, "Reject", msg.Blocks[3].Elements[1].Text.Text)
		assert.Equal(t, reject, msg.Blocks[3].Elements[1].URL)
	})
	t.Run("ntfy", func(t *testing.T) {
		got := ntfy.next(t, "ntfy notification")
		assert.Equal(t, "/team-approvals", got.Path)
		assert.Equal(t, "Approval needed: send_email", got.Header.Get("Title"))
		assert.Equal(t, "4", got.Header.Get("Priority"))
		assert.Equal(t, "bell", got.Header.Get("Tags"))
		assert.Equal(t, link, got.Header.Get("Click"))
		assert.Equal(t, "view, Approve, "+approve+"; view, Reject, "+reject, got.Header.Get("Actions"))
		assert.Equal(t, "Bearer tk_token", got.Header.Get("Authorization"))
		for _, want := range []string{description, "Caller: bot-7", "Conversation: conv-42", "Estimated cost: 0.25", "Deadline: " + deadline} {
			assert.Contains(t, string(got.Body), want)
		}
	})

	// A decision is a short message of its own on each channel.
	_, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	got := slack.next(t, "slack decision")
	var msg struct{ Text string }
	require.NoError(t, json.Unmarshal(got.Body, &msg))
	assert.Contains(t, msg.Text, "send_email approved by alice")
	assert.Contains(t, string(got.Body), link, "links to the call")
	assert.NotContains(t, string(got.Body), approve, "no more buttons")
	got = ntfy.next(t, "ntfy decision")
	assert.Equal(t, "send_email approved by alice", got.Header.Get("Title"))
	assert.Equal(t, "white_check_mark", got.Header.Get("Tags"))
	assert.Empty(t, got.Header.Get("Actions"))

	e2 := ntSubmit(t, m, machine.Call{ToolCallID: "second"})
	slack.next(t, "second card")
	ntfy.next(t, "second card")
	_, err = m.Decide(t.Context(), e2.PendingID, machine.Decision{Approve: false, By: "bob", Reason: "not now"})
	require.NoError(t, err)
	got = slack.next(t, "slack rejection")
	assert.Contains(t, string(got.Body), "send_email rejected by bob")
	assert.Contains(t, string(got.Body), "not now")
	got = ntfy.next(t, "ntfy rejection")
	assert.Equal(t, "send_email rejected by bob", got.Header.Get("Title"))
}

func TestNotifier_TwoNotifiersDeliverEachEventOnce(t *testing.T) {
	hook := ntListen(t, nil)
	slack := ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  notify:
    - {type: webhook, url: %q, secret: s}
    - {type: slack, url: %q}
`, hook.URL, slack.URL))
	var a, b ntCounts
	ntStart(t, env, engine, &a, ntFast(3)...)
	ntStart(t, env, engine, &b, ntFast(3)...)

	const calls = 30
	for i := range calls {
		ntSubmit(t, m, machine.Call{ToolCallID: fmt.Sprint("call-", i)})
	}
	ids := map[string]int{}
	for range calls {
		ids[hook.next(t, "webhook").Header.Get(worker.HeaderDelivery)]++
		slack.next(t, "slack")
	}
	assert.Len(t, ids, calls, "every event delivered, none twice")

	// Wait until nothing is pending anywhere, then count again: a
	// duplicate would have arrived by now.
	consumers := []struct{ stream, name string }{{wire.EventsStream, worker.NotifierDurable}}
	for _, ch := range engine.Resolve("", "").Notify {
		consumers = append(consumers, struct{ stream, name string }{worker.NotifyStream, "notifier-" + worker.ChannelKey(ch)})
	}
	bustest.Eventually(t, ntWait, 10*time.Millisecond, "the notifier's consumers delivered and acknowledged everything", func() (bool, any) {
		for _, c := range consumers {
			cons, err := env.JS.Consumer(t.Context(), c.stream, c.name)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", c.name, err)
			}
			info, err := cons.Info(t.Context())
			if err != nil {
				return false, fmt.Sprintf("%s: %v", c.name, err)
			}
			if info.NumPending > 0 || info.NumAckPending > 0 {
				return false, fmt.Sprintf("%s: %d pending, %d unacknowledged", c.name, info.NumPending, info.NumAckPending)
			}
		}
		return true, nil
	})
	assert.Equal(t, calls, hook.count())
	assert.Equal(t, calls, slack.count())
	assert.Equal(t, calls, a.get("webhook/sent")+b.get("webhook/sent"))
	assert.Equal(t, calls, a.get("slack/sent")+b.get("slack/sent"))
}

func TestNotifier_PendingRetrySurvivesRestart(t *testing.T) {
	failed := make(chan struct{})
	var stopped atomic.Bool
	var retriedAfterStop atomic.Bool
	hook := ntListen(t, func(n int, _ ntRequest) int {
		if n == 1 {
			close(failed)
			return http.StatusBadGateway
		}
		retriedAfterStop.Store(stopped.Load())
		return http.StatusOK
	})
	env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  notify: [{type: webhook, url: %q, secret: s}]\n", hook.URL))
	// The retry is due after the first notifier is gone; only JetStream
	// remembers it.
	opts := []worker.NotifierOption{worker.WithDeliveryBackoff(time.Second), worker.WithDeliveryAttempts(3)}
	counts := &ntCounts{}
	stop := ntStart(t, env, engine, counts, opts...)
	e := ntSubmit(t, m, machine.Call{})
	select {
	case <-failed:
	case <-time.After(ntWait):
		t.Fatal("no first attempt")
	}
	// Once the failure is counted the retry is handed back to JetStream.
	bustest.Eventually(t, ntWait, time.Millisecond, "webhook/failed at 1", func() (bool, any) { got := counts.get("webhook/failed"); return got == 1, got })
	stop()
	stopped.Store(true)

	ntStart(t, env, engine, nil, opts...)
	got := hook.next(t, "the retry, by the new notifier")
	assert.True(t, retriedAfterStop.Load(), "the retry came after the first notifier stopped")
	var ev wire.Event
	require.NoError(t, json.Unmarshal(got.Body, &ev))
	assert.Equal(t, e.PendingID, ev.Entry.PendingID)
	assert.Equal(t, 2, hook.count())
}

func TestNotifier_ChannelLeftThePolicyGetsNoMore(t *testing.T) {
	hook := ntListen(t, func(int, ntRequest) int { return http.StatusServiceUnavailable })
	doc := fmt.Sprintf("default:\n  notify: [{type: webhook, url: %q, secret: s}]\n", hook.URL)
	env, engine, m := ntEnv(t, doc)
	counts := &ntCounts{}
	ntStart(t, env, engine, counts, worker.WithDeliveryBackoff(200*time.Millisecond), worker.WithDeliveryAttempts(10))
	ntSubmit(t, m, machine.Call{})
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "the hook got a delivery", func() (bool, any) { n := hook.count(); return n >= 1, n })

	// Muted while a retry waits: the retry finds no channel and drops it.
	d, err := tgpolicy.Parse([]byte("default:\n  notify: []\n"))
	require.NoError(t, err)
	require.NoError(t, engine.SetDocument(d))
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "webhook/skipped at 1", func() (bool, any) { got := counts.get("webhook/skipped"); return got == 1, got })
	n := hook.count()
	assert.Less(t, n, 10)
	ntSubmit(t, m, machine.Call{ToolCallID: "after"})
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "none/skipped at 1", func() (bool, any) { got := counts.get("none/skipped"); return got == 1, got })
	assert.Equal(t, n, hook.count())
}

// TestNotifier_ResolvesSecretReferencesAtEachDelivery: a channel's URL and
// secret given as env: and file: references are looked up when a delivery
// is sent, so the policy never holds them, and a rotated file applies to
// the next delivery.
func TestNotifier_ResolvesSecretReferencesAtEachDelivery(t *testing.T) {
	hook := ntListen(t, nil)
	t.Setenv("TOOLGATE_TEST_HOOK_URL", hook.URL+"/toolgate")
	secretFile := filepath.Join(t.TempDir(), "hook-secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("first\n"), 0o600))
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  notify:
    - {type: webhook, url: "env:TOOLGATE_TEST_HOOK_URL", secret: "file:%s"}
`, secretFile))
	counts := &ntCounts{}
	ntStart(t, env, engine, counts, ntFast(3)...)

	ntSubmit(t, m, machine.Call{ToolCallID: "one"})
	got := hook.next(t, "the first delivery")
	assert.Equal(t, "/toolgate", got.Path)
	assert.NoError(t, ntVerifyRaw(t, "first", got))

	require.NoError(t, os.WriteFile(secretFile, []byte("second\n"), 0o600))
	ntSubmit(t, m, machine.Call{ToolCallID: "two"})
	got = hook.next(t, "the delivery after the secret's rotation")
	assert.NoError(t, ntVerifyRaw(t, "second", got))

	assert.Equal(t, tgpolicy.Channel{Type: tgpolicy.ChannelWebhook, URL: "env:TOOLGATE_TEST_HOOK_URL", Secret: "file:" + secretFile},
		engine.Document().Default.Notify[0], "the policy keeps the references, never what they resolve to")
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "webhook/sent at 2", func() (bool, any) { got := counts.get("webhook/sent"); return got == 2, got })
}

// ntVerifyRaw verifies a delivery with the Standard Webhooks library,
// keyed with secret's bytes (a secret without the whsec_ prefix).
func ntVerifyRaw(t *testing.T, secret string, r ntRequest) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhookRaw([]byte(secret))
	require.NoError(t, err)
	return wh.Verify(r.Body, r.Header)
}

// TestNotifier_UnresolvableReferenceIsDeadLetteredNamingIt: a reference
// that does not resolve in the notifier's process is retried like a
// channel that is down, then dead-lettered with an error that names the
// reference.
func TestNotifier_UnresolvableReferenceIsDeadLetteredNamingIt(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "slack-url")
	env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  notify: [{type: slack, url: %q}]\n", "file:"+missing))
	counts := &ntCounts{}
	ntStart(t, env, engine, counts, ntFast(2)...)
	ntSubmit(t, m, machine.Call{})
	cons, err := env.JS.OrderedConsumer(t.Context(), wire.DeadLetterStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.DeadLetterSubject(worker.NotifierDurable)},
	})
	require.NoError(t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(ntWait))
	require.NoError(t, err)
	h := msg.Headers()
	assert.Equal(t, "2", h.Get(consumer.HeaderDeadDeliveries), "retried, as a file may yet appear")
	assert.Contains(t, h.Get(consumer.HeaderDeadError), "url: policy: secret file:"+missing+": no such file or directory")
	assert.Equal(t, "file:"+missing, h.Get(worker.HeaderChannelHost))
	assert.Equal(t, 2, counts.get("slack/failed"))
}

func TestNotifier_RefusalIsDeadLetteredAtOnce(t *testing.T) {
	hook := ntListen(t, func(int, ntRequest) int { return http.StatusGone })
	env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  notify: [{type: slack, url: %q}]\n", hook.URL))
	ntStart(t, env, engine, nil, ntFast(5)...)
	ntSubmit(t, m, machine.Call{})
	cons, err := env.JS.OrderedConsumer(t.Context(), wire.DeadLetterStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.DeadLetterSubject(worker.NotifierDurable)},
	})
	require.NoError(t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(ntWait))
	require.NoError(t, err)
	assert.Equal(t, "1", msg.Headers().Get(consumer.HeaderDeadDeliveries), "a 410 is not retried")
	assert.Contains(t, msg.Headers().Get(consumer.HeaderDeadError), "410 Gone")
	assert.Equal(t, 1, hook.count())
}

func TestNotifier_TellsOfWhatAHumanWaitsOn(t *testing.T) {
	t.Parallel()
	pending, scheduled, approved, executing := machine.StatePendingApproval, machine.StateScheduled, machine.StateApproved, machine.StateExecuting
	told := map[machine.Event][]machine.State{
		machine.EventAsk:      {""},
		machine.EventApprove:  {pending},
		machine.EventVote:     {pending},
		machine.EventReject:   {pending},
		machine.EventEscalate: {pending},
		machine.EventTimeout:  {pending},
		machine.EventOverdue:  {pending},
		machine.EventRemind:   {pending},
		machine.EventCancel:   {pending},
		machine.EventRespond:  {pending},
	}
	untold := map[machine.Event][]machine.State{
		machine.EventSchedule:  {""},
		machine.EventDeny:      {""},
		machine.EventCancel:    {scheduled, approved},
		machine.EventStart:     {scheduled, approved},
		machine.EventReclaim:   {executing},
		machine.EventHeartbeat: {executing},
		machine.EventSucceed:   {executing},
		machine.EventFail:      {executing},
		// A reviewer left the call to the humans already told of it.
		machine.EventReview: {pending},
	}
	for _, ev := range machine.Events() {
		to, _ := ev.Target()
		assert.True(t, len(told[ev])+len(untold[ev]) > 0, "%s: say whether humans hear of it", ev)
		for _, from := range told[ev] {
			assert.True(t, worker.Notifies(&wire.Event{Event: ev, From: from, To: to}), "%s from %q", ev, from)
		}
		for _, from := range untold[ev] {
			assert.False(t, worker.Notifies(&wire.Event{Event: ev, From: from, To: to}), "%s from %q", ev, from)
		}
	}
	// A run whose outcome is unknown is news: only a person runs it again.
	assert.True(t, worker.Notifies(&wire.Event{Event: machine.EventFail, From: executing, To: machine.StateCompletedFailure,
		Entry: &machine.Entry{OutcomeUnknown: true}}))
	assert.Equal(t, []string{
		wire.SubjectApprovalRequired, wire.SubjectApprovalGranted, wire.SubjectApprovalProgress, wire.SubjectApprovalRejected,
		wire.SubjectApprovalEscalated, wire.SubjectApprovalTimeout, wire.SubjectApprovalOverdue, wire.SubjectApprovalReminder, wire.SubjectCancelled,
		wire.SubjectExecutionFailed, wire.SubjectApprovalResponded,
	}, worker.NotifySubjects)
}

func TestChannelKey(t *testing.T) {
	c := tgpolicy.Channel{Type: tgpolicy.ChannelWebhook, URL: "https://h.example/x", Secret: "a"}
	k := worker.ChannelKey(c)
	assert.Regexp(t, `^webhook-[0-9a-f]{16}$`, k)
	c.Secret = "rotated"
	assert.Equal(t, k, worker.ChannelKey(c), "a new secret is the same channel")
	c.URL = "https://h.example/y"
	assert.NotEqual(t, k, worker.ChannelKey(c))
	assert.NotContains(t, worker.ChannelKey(tgpolicy.Channel{Type: tgpolicy.ChannelSlack, URL: "https://hooks.slack.com/services/T/B/X"}), "services")
}

func TestNotifier_RetryAfterDelaysTheRetry(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			var mu sync.Mutex
			var at []time.Time
			delivered := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				at = append(at, time.Now())
				n := len(at)
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(code)
					return
				}
				if n == 2 {
					close(delivered)
				}
			}))
			t.Cleanup(srv.Close)
			env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  notify: [{type: ntfy, url: %q, topic: t}]\n", srv.URL))
			counts := &ntCounts{}
			ntStart(t, env, engine, counts, ntFast(5)...)
			ntSubmit(t, m, machine.Call{})
			select {
			case <-delivered:
			case <-time.After(ntWait):
				t.Fatal("never retried")
			}
			mu.Lock()
			defer mu.Unlock()
			assert.GreaterOrEqual(t, at[1].Sub(at[0]), time.Second, "waited as the receiver asked, not the 10ms backoff")
			bustest.Eventually(t, ntWait, 5*time.Millisecond, "ntfy/sent at 1", func() (bool, any) { got := counts.get("ntfy/sent"); return got == 1, got })
			assert.Equal(t, 1, counts.get("ntfy/failed"))
		})
	}
}

func TestNotifier_StopLeavesNothingRunning(t *testing.T) {
	hook := ntListen(t, nil)
	slow := ntListen(t, func(int, ntRequest) int { return http.StatusBadGateway })
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  notify:
    - {type: webhook, url: %q, secret: s}
    - {type: slack, url: %q}
`, hook.URL, slow.URL))
	stop := ntStart(t, env, engine, nil, ntFast(5)...)
	ntSubmit(t, m, machine.Call{})
	hook.next(t, "webhook")
	bustest.Eventually(t, ntWait, 5*time.Millisecond, "the slow receiver got a delivery", func() (bool, any) { n := slow.count(); return n >= 1, n })
	assert.NotEmpty(t, ntGoroutines())
	stop()
	assert.Empty(t, ntGoroutines(), "Run returned with goroutines it started still running")
}

// ntGoroutines returns the stacks of the goroutines the notifier and its
// runners started, or that run their code.
func ntGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "toolgate/internal/worker.(*Notifier)") || strings.Contains(g, "toolgate/internal/consumer.(*Runner)") {
			found = append(found, g)
		}
	}
	return found
}

// TestNotifier_QuorumProgressAndEscalationReachTheChannel: the approvers
// hear of an approval short of the quorum (who approved, who is still
// needed) and, when a tier is reached, who may decide now, each with the
// buttons a waiting call's card has.
func TestNotifier_QuorumProgressAndEscalationReachTheChannel(t *testing.T) {
	t.Parallel()
	slack := ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  approvalTimeoutMs: 600000
  approvers: [alice, bob]
  quorum: {send_email: {required: 2}}
  escalate: [{afterMs: 1500, to: [oncall]}]
  inboxUrl: "https://toolgate.example/"
  notify:
    - {type: slack, url: "%s/services/T/B/X"}
`, slack.URL))
	ntStart(t, env, engine, nil, ntFast(3)...)
	startTimer(t, env, new(toolgatetest.Clock)) // on time.Now, as m is
	e := ntSubmit(t, m, machine.Call{})
	require.Equal(t, &machine.Quorum{Required: 2}, e.Quorum)
	body := func(what string) string {
		var msg struct{ Text string }
		got := slack.next(t, what)
		require.NoError(t, json.Unmarshal(got.Body, &msg))
		return msg.Text
	}
	assert.Contains(t, body("the request"), "Approval needed: send_email")

	_, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	text := body("the progress")
	assert.Contains(t, text, "send_email: approved by alice: 1 of 2 approvals; still needed: one of bob")
	assert.Contains(t, text, "?decision=approve", "the others are offered the decision")

	text = body("the escalation")
	assert.Contains(t, text, "Escalated: send_email still needs a decision (alice, bob, oncall may decide)")
	got, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "oncall"})
	require.NoError(t, err, "the tier reached counts toward the quorum")
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Contains(t, body("the approval"), "send_email approved by oncall")
}

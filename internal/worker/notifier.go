package worker

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Names of what the Notifier keeps on the bus.
const (
	// NotifyStream holds the deliveries not yet made: one message per
	// event and channel, on NotifySubject(key), removed once delivered
	// (work-queue retention). bus.Provision creates it.
	NotifyStream = wire.NotifyStream
	// NotifierDurable is the consumer on TOOL_EVENTS that every Notifier
	// process shares, and the dead-letter subject's last token.
	NotifierDurable = "notifier"
)

// NotifySubject is where the deliveries to one channel wait.
func NotifySubject(channelKey string) string { return wire.NotifySubject(channelKey) }

// Headers on a delivery and on a dead-lettered one (beside bus's
// HeaderDead* ones: consumer, subject, stream sequence, deliveries, error).
const (
	HeaderChannel     = "Toolgate-Channel"      // the channel's key, ChannelKey
	HeaderChannelHost = "Toolgate-Channel-Host" // its URL's host, for a human reading dead letters
	HeaderEventID     = "Toolgate-Event-Id"     // the wire.Event's id, <pendingId>:<revision>
)

// The results a NotificationCounter is told of (the same words as
// metrics.NotificationSent, …).
const (
	NotificationSent    = "sent"    // the channel accepted a delivery
	NotificationFailed  = "failed"  // one attempt failed (it may be retried)
	NotificationSkipped = "skipped" // nothing to send: no channel, or the channel left the policy
)

// NotificationCounter is told of every delivery attempt, by channel type
// (webhook, slack, ntfy; "none" for an event whose call names no channel)
// and result. *metrics.Metrics is one.
type NotificationCounter interface {
	Notification(channel, result string)
}

// NotificationCounterFunc adapts a function to a NotificationCounter.
type NotificationCounterFunc func(channel, result string)

// Notification calls f.
func (f NotificationCounterFunc) Notification(channel, result string) { f(channel, result) }

// Notifier tells humans that a call waits for them, and when it stops
// waiting: for every tool.approval_required event, and every decision on a
// call that was pending (approval_granted, approval_rejected,
// approval_timeout, cancelled) — the events machine's transition table
// marks as notifying — it delivers to each channel the call's
// policy names (notify, resolved for the call's team and conversation): a
// signed webhook, a Slack message, an ntfy notification, an email.
//
// Delivery is in two steps, so that one slow or dead channel never holds
// up another, and a pending retry survives a restart:
//
//  1. Fan-out. One durable consumer on TOOL_EVENTS, shared by every
//     Notifier process (so each event is handled by one), resolves the
//     call's channels and publishes one delivery per channel to
//     TOOL_NOTIFY on toolgate.notify.<channel key>, de-duplicated by
//     Nats-Msg-Id <event id>:<channel key>. No HTTP happens here, so it
//     never waits on a channel. Events are fanned out one at a time, so
//     each channel's deliveries queue in event order.
//  2. Delivery. Each channel has its own durable consumer on its own
//     subject, again shared by every process, run by a consumer.Runner of
//     its own with at most WithChannelConcurrency deliveries in flight per
//     process. A failed attempt is handed back to JetStream with a delay
//     (after WithDeliveryBackoff, or a 429's or 503's Retry-After if
//     longer), so a retry waiting for its turn is a message in the
//     server, not a timer in a process that may die; after
//     WithDeliveryAttempts attempts, or at once for a refusal retrying
//     cannot fix (a 4xx other than 408, 425 and 429), it is published to
//     wire.DeadLetterSubject("notifier") and dropped. A dead channel's
//     retries fill only its own consumer's ack window.
//
// A delivery carries the event, not the channel: it is resolved again
// from the policy when sent, so secrets are stored only in the policy, a
// changed secret applies to retries, and a channel removed from the
// policy gets no more (its queued deliveries are dropped as skipped).
//
// Processes learn of channel consumers three ways: those that exist at
// start, those their own fan-out creates, and those another process
// creates (JetStream's consumer-created advisory), so a channel's queue is
// drained while any Notifier runs.
//
// What each channel gets: a webhook, the wire.Event envelope exactly as
// published on TOOL_EVENTS, signed as Standard Webhooks sign (see
// HeaderWebhookSignature) with each of its secrets; Slack, a card (blocks,
// with text as the fallback) naming the tool, the policy's one-line
// description, caller, conversation, estimated cost and deadline, with
// Approve and Reject buttons linking to <inboxUrl>/#/calls/<pendingId>
// (?decision=approve or reject), and for a decision a short message
// ("deploy approved by alice"), as an incoming webhook cannot edit what it
// posted; ntfy, the same as a notification with Title, Tags, Priority,
// Click and view Actions headers; email, a message by SMTP with a text and
// an HTML part (notifier_email.go). A Slack channel with its app's signing
// secret gets buttons that decide in Slack instead of links (action ids
// gate.SlackAction*, value the pendingId); a webhook, ntfy or email
// channel that names an approver gets one-time decision links
// (WithDecisionTokens).
//
// The consumer on TOOL_EVENTS is created at the stream's end: a Notifier
// started for the first time tells of what happens from then on, not of
// the stream's history. Restarted, it goes on where it stopped.
//
// A delivery is made at least once: an attempt whose response is lost is
// tried again, so a webhook receiver de-duplicates by webhook-id.
// Retries may reorder a channel's messages (a decision overtaking the
// request whose first attempt failed).
type Notifier struct {
	conn    *bus.Conn
	engine  *policy.Engine
	counter NotificationCounter
	log     *slog.Logger

	client     *http.Client
	timeout    time.Duration
	backoff    []time.Duration
	attempts   int
	perChannel int
	now        func() time.Time
	ackWait    time.Duration
	tokens     DecisionTokenIssuer
	smtpTLS    *tls.Config

	mu      sync.Mutex
	stopped bool
	made    map[string]bool // channel consumers this process has created or found
	pulling map[string]bool // channel consumers this process pulls from
	pullers sync.WaitGroup
}

// NotifierOption configures a Notifier.
type NotifierOption func(*Notifier)

// WithDeliveryBackoff sets the delay before each retry of a failed
// delivery, the last repeating (default 1s, 5s, 30s, 2m, 10m, 30m). A
// Retry-After on a 429 or 503 lengthens it.
func WithDeliveryBackoff(d ...time.Duration) NotifierOption {
	return func(n *Notifier) {
		if len(d) > 0 {
			n.backoff = d
		}
	}
}

// WithDeliveryAttempts sets how many attempts a delivery gets before it is
// dead-lettered (default 8).
func WithDeliveryAttempts(attempts int) NotifierOption {
	return func(n *Notifier) {
		if attempts > 0 {
			n.attempts = attempts
		}
	}
}

// WithHTTPTimeout bounds each HTTP attempt, from dial to the response's
// end (default 10s).
func WithHTTPTimeout(d time.Duration) NotifierOption {
	return func(n *Notifier) {
		if d > 0 {
			n.timeout = d
		}
	}
}

// WithHTTPClient sets the client deliveries are sent with (default: a
// client of its own over http.DefaultTransport). Each request carries its
// own timeout; the client needs none.
func WithHTTPClient(c *http.Client) NotifierOption {
	return func(n *Notifier) {
		if c != nil {
			n.client = c
		}
	}
}

// WithChannelConcurrency bounds the deliveries to one channel that one
// process makes at once (default 4).
func WithChannelConcurrency(k int) NotifierOption {
	return func(n *Notifier) {
		if k > 0 {
			n.perChannel = k
		}
	}
}

// NewNotifier returns a Notifier that resolves each call's channels with
// engine, which its caller keeps current (stores.PolicyStore.Follow). counter
// may be nil. Run starts it.
func NewNotifier(conn *bus.Conn, engine *policy.Engine, counter NotificationCounter, log *slog.Logger, opts ...NotifierOption) *Notifier {
	n := &Notifier{
		conn: conn, engine: engine, counter: counter, log: log,
		client:     &http.Client{},
		timeout:    10 * time.Second,
		backoff:    []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute},
		attempts:   8,
		perChannel: 4,
		now:        time.Now,
		made:       map[string]bool{},
		pulling:    map[string]bool{},
	}
	for _, o := range opts {
		o(n)
	}
	// A delivery may wait for a slot behind one attempt and then make its
	// own; JetStream must not hand it to another process meanwhile.
	n.ackWait = max(30*time.Second, 3*n.timeout+5*time.Second)
	return n
}

// notifySubjects are the events a Notifier reads: those humans are told
// of, and the failures, for a run whose outcome is unknown.
var notifySubjects = wire.EventSubjectsOf(func(ev machine.Event) bool { return ev.Notifies() || ev == machine.EventFail })

// Run notifies until ctx ends, then waits for the deliveries in flight
// (each bounded by the HTTP timeout).
func (n *Notifier) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	err := n.run(ctx)
	cancel()
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	n.pullers.Wait()
	return err
}

func (n *Notifier) run(ctx context.Context) error {
	// The channels' consumers there are, and those created from then on,
	// by whichever process.
	stop, err := consumer.Consumers(ctx, n.conn.JetStream(), NotifyStream, func(name string, existing bool) {
		key, ok := strings.CutPrefix(name, NotifierDurable+"-")
		if !ok {
			return
		}
		if existing {
			n.mu.Lock()
			n.made[key] = true
			n.mu.Unlock()
		}
		n.pull(ctx, key)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("notifier: consumers of %s: %w", NotifyStream, err)
	}
	defer stop()
	return n.fanOutRunner().Run(ctx)
}

// CreateConsumer creates the notifier's consumer of the events, or brings
// it up to date, as Run does when it starts. The consumer delivers only
// what comes after it: a process creates it before it serves, so that
// no call asked from then on goes untold.
func (n *Notifier) CreateConsumer(ctx context.Context) error {
	_, err := n.fanOutRunner().CreateConsumer(ctx)
	return err
}

// fanOutRunner reads the events that notify, and queues each one's
// deliveries (fanOut).
func (n *Notifier) fanOutRunner() *consumer.Runner {
	return consumer.NewRunner(n.conn.JetStream(), consumer.ConsumerConfig{
		Stream:         wire.EventsStream,
		Durable:        NotifierDurable,
		FilterSubjects: notifySubjects,
		// A new notifier tells of what happens from now on, not of the
		// stream's history.
		DeliverNew: true,
		MaxDeliver: n.attempts,
		Backoff:    n.backoff,
		// One event at a time, so that each channel's deliveries are
		// queued in the order of the events; a fan-out takes a publish
		// a channel, so a pull brings many.
		Concurrency: 1,
		Prefetch:    64,
	}, n.log, n.fanOut)
}

// notifies reports whether ev is one a human is told of: its kind is, and
// the call was waiting for a decision or starts to, or it is the end of a
// run whose outcome is unknown, which only a person runs again. A cancel
// of a call nobody was asked about is not news to anyone.
func notifies(ev *wire.Event) bool {
	return notifiesOf(ev.Event, ev.From, ev.To, ev.Entry != nil && ev.Entry.OutcomeUnknown)
}

func notifiesOf(ev machine.Event, from, to machine.State, outcomeUnknown bool) bool {
	return ev == machine.EventFail && outcomeUnknown ||
		ev.Notifies() && (from == machine.StatePendingApproval || to == machine.StatePendingApproval)
}

// fanOut queues one event's deliveries, one per channel.
func (n *Notifier) fanOut(ctx context.Context, msg consumer.Msg) error {
	ev, err := wire.DecodeEventHead(msg.Data())
	if err != nil || ev.Entry == nil || ev.ID == "" {
		return consumer.Permanent(fmt.Errorf("notifier: undecodable event (err %v)", err))
	}
	if !notifiesOf(ev.Event, ev.From, ev.To, ev.Entry.OutcomeUnknown) {
		return nil
	}
	r := n.engine.Resolve(ev.Entry.Team, ev.Entry.ConversationID)
	if len(r.Notify) == 0 {
		n.count("none", NotificationSkipped)
		return nil
	}
	for _, ch := range r.Notify {
		key := ChannelKey(ch)
		if err := n.ensureConsumer(ctx, key); err != nil {
			return err
		}
		n.pull(ctx, key)
		header := map[string][]string{HeaderChannel: {key}, HeaderEventID: {ev.ID}}
		if err := consumer.Publish(ctx, n.conn.JetStream(), NotifySubject(key), msg.Data(), header, ev.ID+":"+key); err != nil {
			// Redelivered, the event publishes again; the channels
			// already queued drop the repeat as a duplicate.
			return fmt.Errorf("notifier: queue %s for %s: %w", ev.ID, key, err)
		}
	}
	return nil
}

// ChannelKey names a channel on the bus: its type and a hash of where it
// goes (URL and topic, an email channel's addresses; not the secret,
// which may change), safe as a
// subject token and a consumer name, and revealing nothing of a Slack
// URL, which is a secret.
func ChannelKey(c policy.Channel) string {
	where := string(c.Type) + "\x00" + c.URL + "\x00" + c.Topic
	if c.Type == policy.ChannelEmail {
		// An email channel is its server and its addresses.
		where += "\x00" + strings.Join(c.To, ",")
	}
	h := sha256.Sum256([]byte(where))
	return string(c.Type) + "-" + hex.EncodeToString(h[:8])
}

func consumerName(key string) string { return NotifierDurable + "-" + key }

// channelRunner is the runner of a channel's deliveries: every process
// makes the same one, so whichever creates the consumer creates it alike.
func (n *Notifier) channelRunner(key string) *consumer.Runner {
	return consumer.NewRunner(n.conn.JetStream(), consumer.ConsumerConfig{
		Stream:  NotifyStream,
		Durable: consumerName(key),
		// Not the channel's host: a process that learns of the consumer
		// from an advisory knows only the key, and would rewrite it.
		Description:    "toolgate notifier: deliveries to channel " + key,
		FilterSubjects: []string{NotifySubject(key)},
		MaxDeliver:     n.attempts,
		Backoff:        n.backoff,
		AckWait:        n.ackWait,
		Concurrency:    n.perChannel,
		// Retries waiting out their delay count here: a dead channel can
		// hold this many, and only its own.
		MaxAckPending: 256,
		DeadLetter: consumer.DeadLetterConfig{
			Subject: wire.DeadLetterSubject(NotifierDurable),
			Header:  func(msg consumer.Msg, _ error) map[string][]string { return n.deadLetterHeader(key, msg) },
		},
	}, n.log.With("channel", key), n.deliver(key))
}

func (n *Notifier) ensureConsumer(ctx context.Context, key string) error {
	n.mu.Lock()
	made := n.made[key]
	n.mu.Unlock()
	if made {
		return nil
	}
	if _, err := n.channelRunner(key).CreateConsumer(ctx); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	n.mu.Lock()
	n.made[key] = true
	n.mu.Unlock()
	return nil
}

// pull starts this process's runner for a channel, unless it has one. It
// runs until ctx ends; Run waits for it.
func (n *Notifier) pull(ctx context.Context, key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped || n.pulling[key] || ctx.Err() != nil {
		return
	}
	n.pulling[key] = true
	r := n.channelRunner(key)
	n.pullers.Go(func() {
		if err := r.Run(ctx); err != nil {
			n.log.Error("notifier: stopped delivering to a channel", "channel", key, "err", err)
		}
	})
}

// errChannelNotYet is a delivery to a channel this process's policy does
// not name yet.
var errChannelNotYet = errors.New("notifier: channel not in this process's policy yet")

// deliver returns the handler of a channel's deliveries: it makes one
// attempt and tells the runner how it went. A refusal retrying cannot fix
// is Permanent, and a receiver's Retry-After becomes the retry's delay.
func (n *Notifier) deliver(key string) consumer.Handler {
	return func(ctx context.Context, msg consumer.Msg) error {
		attempt := 0
		if meta, err := msg.Metadata(); err == nil {
			attempt = int(meta.NumDelivered)
		}
		var ev wire.Event
		if err := wire.Unmarshal(msg.Data(), &ev); err != nil || ev.Entry == nil {
			return consumer.Permanent(fmt.Errorf("undecodable delivery (err %v)", err))
		}
		log := n.log.With("channel", key, "event", ev.ID, "attempt", attempt)
		r := n.engine.Resolve(ev.Entry.Team, ev.Entry.ConversationID)
		ch, ok := findChannel(r.Notify, key)
		if !ok {
			if attempt == 1 {
				// The process that queued it may have seen a policy change
				// this one has not yet: give the watch a moment.
				return consumer.RetryAfter(errChannelNotYet, n.backoff[0])
			}
			log.Info("notifier: channel no longer in the call's policy; delivery dropped")
			n.count(channelType(key), NotificationSkipped)
			return nil
		}
		err := n.send(ctx, ch, r.InboxURL, &ev, msg.Data())
		if err == nil {
			n.count(string(ch.Type), NotificationSent)
			log.Debug("notifier: delivered")
			return nil
		}
		if ctx.Err() != nil {
			return err // stopping: not a failure of the channel's
		}
		n.count(string(ch.Type), NotificationFailed)
		var se *sendError
		switch {
		case !errors.As(err, &se):
		case se.permanent:
			return consumer.Permanent(err)
		case se.retryAfter > 0:
			return consumer.RetryAfter(err, se.retryAfter)
		}
		return err
	}
}

// deadLetterHeader names the host of a channel's URL on a delivery given
// up on, for a human reading dead letters; the path may be a secret.
func (n *Notifier) deadLetterHeader(key string, msg consumer.Msg) map[string][]string {
	var ev wire.Event
	if json.Unmarshal(msg.Data(), &ev) != nil || ev.Entry == nil {
		return nil
	}
	ch, ok := findChannel(n.engine.Resolve(ev.Entry.Team, ev.Entry.ConversationID).Notify, key)
	if !ok {
		return nil
	}
	host := redactURL(ch.URL)
	if policy.IsSecretRef(ch.URL) {
		host = ch.URL // where the URL is, which is no secret
	}
	return map[string][]string{HeaderChannelHost: {host}}
}

func findChannel(chans []policy.Channel, key string) (policy.Channel, bool) {
	for _, c := range chans {
		if ChannelKey(c) == key {
			return c, true
		}
	}
	return policy.Channel{}, false
}

// channelType is the type part of a channel key.
func channelType(key string) string {
	t, _, _ := strings.Cut(key, "-")
	return t
}

func (n *Notifier) count(channel, result string) {
	if n.counter != nil {
		n.counter.Notification(channel, result)
	}
}

package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// Msg is the message a Handler processes: what of a JetStream message a
// handler reads, not what settles it, which is the Runner's.
type Msg interface {
	Subject() string
	Data() []byte
	Headers() nats.Header
	// Metadata says where the message is in its stream, and how often it
	// was delivered.
	Metadata() (*jetstream.MsgMetadata, error)
}

// Handler processes one message. Returning nil acks it; an error has it
// redelivered after a backoff, until the consumer gives up and dead-letters
// it. A handler must be idempotent: it may see a message more than once.
type Handler func(ctx context.Context, msg Msg) error

// Middleware wraps a Handler with a concern shared by every consumer
// (metrics, logging, tracing).
type Middleware func(Handler) Handler

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that the runner dead-letters the message at once
// instead of retrying it.
func Permanent(err error) error { return permanent{err} }

// IsPermanent reports whether err, or an error it wraps, is Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// retryAfter is a failure whose source said when to try again.
type retryAfter struct {
	err   error
	delay time.Duration
}

func (r retryAfter) Error() string { return r.err.Error() }
func (r retryAfter) Unwrap() error { return r.err }

// RetryAfter wraps err so that the runner redelivers the message no sooner
// than d from now: an HTTP 429 or 503 whose Retry-After asks for patience,
// say. A backoff longer than d still applies, as waiting longer than asked
// is what a Retry-After allows; a d beyond the runner's MaxRetryAfter is
// cut to it, so that a receiver cannot park a message for days. The
// message still counts the attempt towards MaxDeliver.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return retryAfter{err: err, delay: d}
}

// RetryDelay returns the delay RetryAfter put on err, if it did.
func RetryDelay(err error) (time.Duration, bool) {
	var r retryAfter
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}

// ConsumerConfig describes a durable consumer and how its handler runs.
type ConsumerConfig struct {
	Stream         string
	Durable        string
	Description    string
	FilterSubjects []string
	// DeliverNew starts a new consumer at the stream's end instead of its
	// beginning.
	DeliverNew bool
	// MaxDeliver is how many times a message is tried before it goes to
	// the dead-letter subject (default 5).
	MaxDeliver int
	// Backoff is the delay before each retry; the last one repeats
	// (default 1s, 2s, 4s, 8s).
	Backoff []time.Duration
	// MaxRetryAfter caps the delay a RetryAfter error asks for (default
	// 1h).
	MaxRetryAfter time.Duration
	// AckWait is how long a message may go unacked before it is
	// redelivered; the runner keeps it from expiring while the handler
	// works (default 30s).
	AckWait time.Duration
	// Concurrency is how many messages are handled at once (default 1).
	Concurrency int
	// Prefetch is how many messages a pull asks for (default
	// Concurrency): more only for a handler quick enough that a message
	// waiting behind the others in hand is handled well within AckWait.
	// A pull brings at most this many, and each round trip to ask for
	// more is one the handlers may wait on.
	Prefetch int
	// MaxAckPending bounds the messages delivered and not yet acked,
	// retries waiting out their delay included (default 4 × Concurrency,
	// and at least Prefetch).
	MaxAckPending int
	// DeadLetter says where and how a message given up on is kept.
	DeadLetter DeadLetterConfig
}

// DeadLetterConfig tunes the dead letters of a Runner.
type DeadLetterConfig struct {
	// Subject is where they go (default wire.DeadLetterSubject(Durable)):
	// consumers of one kind may share one.
	Subject string
	// Header, when set, adds headers to a dead letter, beside the
	// message's own and the HeaderDead* ones: what a human reading it
	// needs and the message does not say.
	Header func(msg Msg, cause error) map[string][]string
}

// Runner runs a Handler over a durable JetStream consumer.
type Runner struct {
	js      jetstream.JetStream
	cfg     ConsumerConfig
	handler Handler
	log     *slog.Logger
}

// NewRunner returns a runner for handler wrapped in middleware, outermost
// first. Retrying and dead-lettering wrap them all, so a middleware sees
// the handler's own error.
func NewRunner(js jetstream.JetStream, cfg ConsumerConfig, log *slog.Logger, handler Handler, middleware ...Middleware) *Runner {
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 5
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = time.Hour
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = cfg.Concurrency
	}
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = max(cfg.Concurrency*4, cfg.Prefetch)
	}
	if cfg.DeadLetter.Subject == "" {
		cfg.DeadLetter.Subject = wire.DeadLetterSubject(cfg.Durable)
	}
	r := &Runner{js: js, cfg: cfg, log: log.With("consumer", cfg.Durable)}
	middleware = append([]Middleware{r.retrying, r.deadLettering}, middleware...)
	for i := len(middleware) - 1; i >= 0; i-- {
		handler = middleware[i](handler)
	}
	r.handler = handler
	return r
}

// Run consumes until ctx ends, then waits for the handlers in flight. A
// JetStream error (a request timing out on a busy cluster, the consumer
// deleted) starts it again after a backoff.
func (r *Runner) Run(ctx context.Context) error {
	return RunRestarting(ctx, r.log, "consumer", r.run)
}

// CreateConsumer creates the durable consumer, or brings its configuration
// up to date, as Run does each time it starts: for a producer that must
// know the consumer exists before it publishes to it.
func (r *Runner) CreateConsumer(ctx context.Context) (jetstream.Consumer, error) {
	deliver := jetstream.DeliverAllPolicy
	if r.cfg.DeliverNew {
		deliver = jetstream.DeliverNewPolicy
	}
	cons, err := r.js.CreateOrUpdateConsumer(ctx, r.cfg.Stream, jetstream.ConsumerConfig{
		Durable:        r.cfg.Durable,
		Description:    r.cfg.Description,
		FilterSubjects: r.cfg.FilterSubjects,
		DeliverPolicy:  deliver,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        r.cfg.AckWait,
		// The runner dead-letters at MaxDeliver itself; the server must not
		// drop a message silently before it gets the chance.
		MaxDeliver:    -1,
		MaxAckPending: r.cfg.MaxAckPending,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", r.cfg.Durable, r.cfg.Stream, err)
	}
	return cons, nil
}

// pullExpiry is how long each pull request the runner keeps open lasts;
// the server heartbeats it every half of that. A pull request lives in
// the consumer's leader: when the server holding it dies, nothing tells
// the client, which notices only by missing two heartbeats and then pulls
// again from the new leader. With nats.go's default (30s, heartbeats every
// 15s), an executor sat idle for up to 30s after such a death while calls
// waited in its queue; with 5s, for 5s.
const pullExpiry = 5 * time.Second

// bindTimeout bounds finding (or creating) the consumer as a run starts.
// Its request goes to JetStream's meta leader (through toolgate's request
// API, for an executor), and one sent just as that leader died is never
// answered: unbounded, it held an executor without work for the 30s of
// toolgate's request timeout after each such death. A run that times out
// starts again, and its new request reaches the new leader.
const bindTimeout = 5 * time.Second

func (r *Runner) run(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, bindTimeout)
	cons, err := r.CreateConsumer(bctx)
	cancel()
	if err != nil {
		return err
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.Prefetch), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("consumer %s: %w", r.cfg.Durable, err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// The iterator is stopped when ctx ends, or when this run ends and a
	// restart will open another: a goroutine per run, not one left behind
	// per restart. The handlers keep ctx itself: a consumer error must not
	// stop the work in hand.
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	wg.Go(func() {
		<-runCtx.Done()
		iter.Stop()
	})
	slots := make(chan struct{}, r.cfg.Concurrency)
	stalled := make(chan error, 1)
	wg.Go(func() {
		if err := WatchStall(runCtx, Watch{JS: r.js, Stream: r.cfg.Stream, Durable: r.cfg.Durable, Consumer: cons,
			InHand: func() int { return len(slots) }, Log: r.log}); err != nil {
			stalled <- err
			endRun()
		}
	})
	for {
		msg, err := iter.Next()
		if err != nil {
			select {
			case err := <-stalled:
				return err
			default:
			}
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("consumer %s: %w", r.cfg.Durable, err)
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			r.handle(ctx, msg)
		})
	}
}

// deadLettered is what the dead-letter middleware returns for a message it
// has put on the dead-letter subject: the runner terminates it.
type deadLettered struct{ err error }

func (d deadLettered) Error() string { return d.err.Error() }
func (d deadLettered) Unwrap() error { return d.err }

// handle runs the handler and settles the message by what it returned:
// nil acks it, a dead-lettered one is terminated, and a retry is handed
// back to the server with its delay, so that a retry waiting for its turn
// is a message in the server, not a timer in a process that may die.
func (r *Runner) handle(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		r.log.Error("no metadata, dropping", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	err = r.runHandler(ctx, msg)
	var dead deadLettered
	switch {
	case err == nil:
		if err := msg.Ack(); err != nil {
			r.log.Warn("ack failed", "seq", meta.Sequence.Stream, "err", err)
		}
	case errors.As(err, &dead):
		r.log.Error("handler gave up, dead-lettered", "seq", meta.Sequence.Stream, "deliveries", meta.NumDelivered, "err", dead.err)
		_ = msg.Term()
	case ctx.Err() != nil:
		// Stopping: leave the message for whoever consumes next.
		_ = msg.Nak()
	default:
		delay, _ := RetryDelay(err)
		r.log.Warn("handler failed, retrying", "seq", meta.Sequence.Stream, "delivery", meta.NumDelivered, "in", delay, "err", err)
		_ = msg.NakWithDelay(delay)
	}
}

// runHandler runs the handler, telling the server the message is still in
// progress so that a slow handler does not get it redelivered elsewhere.
func (r *Runner) runHandler(ctx context.Context, msg jetstream.Msg) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{})
	defer close(done)
	wg.Go(func() {
		t := time.NewTicker(r.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	return r.handler(ctx, msg)
}

// retrying is the middleware that gives a failure its redelivery delay:
// the backoff for its delivery, or what a RetryAfter asked for if that is
// longer, up to MaxRetryAfter.
func (r *Runner) retrying(next Handler) Handler {
	return func(ctx context.Context, msg Msg) error {
		err := next(ctx, msg)
		if err == nil || errors.As(err, new(deadLettered)) {
			return err
		}
		n := 1
		if meta, merr := msg.Metadata(); merr == nil {
			n = max(int(meta.NumDelivered), 1)
		}
		return retryAfter{err: err, delay: r.retryDelay(n, err)}
	}
}

// retryDelay is the delay before the retry that follows delivery n.
func (r *Runner) retryDelay(n int, err error) time.Duration {
	delay := r.cfg.Backoff[min(n, len(r.cfg.Backoff))-1]
	if asked, ok := RetryDelay(err); ok {
		delay = max(delay, min(asked, r.cfg.MaxRetryAfter))
	}
	return delay
}

// deadLettering is the middleware that gives up on a message after its
// last delivery, or at once on a Permanent error: it publishes the
// message to the dead-letter subject, for a human to look at.
func (r *Runner) deadLettering(next Handler) Handler {
	return func(ctx context.Context, msg Msg) error {
		err := next(ctx, msg)
		if err == nil || ctx.Err() != nil {
			return err
		}
		meta, merr := msg.Metadata()
		if merr != nil {
			return err
		}
		if int(meta.NumDelivered) < r.cfg.MaxDeliver && !IsPermanent(err) {
			return err
		}
		if dlErr := r.deadLetter(ctx, msg, meta, err); dlErr != nil {
			r.log.Error("dead-letter failed, retrying", "seq", meta.Sequence.Stream, "err", dlErr)
			return RetryAfter(fmt.Errorf("dead-letter: %w (handler: %v)", dlErr, err), r.cfg.Backoff[len(r.cfg.Backoff)-1])
		}
		return deadLettered{err}
	}
}

// Headers on a dead-lettered message, beside the original ones.
const (
	HeaderDeadConsumer   = "Toolgate-Consumer"
	HeaderDeadSubject    = "Toolgate-Subject"
	HeaderDeadStreamSeq  = "Toolgate-Stream-Seq"
	HeaderDeadDeliveries = "Toolgate-Deliveries"
	HeaderDeadError      = "Toolgate-Error"
)

func (r *Runner) deadLetter(ctx context.Context, msg Msg, meta *jetstream.MsgMetadata, cause error) error {
	header := nats.Header{}
	for k, v := range msg.Headers() {
		if k != jetstream.MsgIDHeader {
			header[k] = v
		}
	}
	if r.cfg.DeadLetter.Header != nil {
		for k, v := range r.cfg.DeadLetter.Header(msg, cause) {
			header[k] = v
		}
	}
	header.Set(HeaderDeadConsumer, r.cfg.Durable)
	header.Set(HeaderDeadSubject, msg.Subject())
	header.Set(HeaderDeadStreamSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
	header.Set(HeaderDeadDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	// A header value cannot hold a line break, and an error (an HTTP
	// body's excerpt, say) may.
	header.Set(HeaderDeadError, strings.Join(strings.Fields(cause.Error()), " "))
	return Publish(ctx, r.js, r.cfg.DeadLetter.Subject, msg.Data(), header, fmt.Sprintf("%s:%d", r.cfg.Durable, meta.Sequence.Stream))
}

// restartHealthy is how long a run must have lasted for its failure to be
// taken as a new one, starting the backoff again.
const restartHealthy = time.Minute

// RunRestarting runs run until ctx ends, starting it again after a backoff
// whenever it fails, unless with a Permanent error, which it returns
// unwrapped. It returns nil when ctx ends. Every process's long-running
// loop over JetStream (consumers, the relay, watches) restarts through it,
// so that a busy cluster, a leader moving or a deleted consumer is waited
// out rather than ending the process.
func RunRestarting(ctx context.Context, log *slog.Logger, what string, run func(context.Context) error) error {
	attempt := 0
	for {
		began := time.Now()
		err := run(ctx)
		var perm permanent
		switch {
		case errors.As(err, &perm):
			return perm.err
		case ctx.Err() != nil:
			return nil
		}
		if time.Since(began) >= restartHealthy {
			attempt = 0
		}
		attempt++
		wait := restartBackoff(attempt)
		log.Warn(what+" stopped, starting again", "err", err, "in", wait)
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// Retry runs f until it succeeds, fails with a Permanent error (returned
// unwrapped) or ctx ends (ctx's error), waiting RunRestarting's backoff
// between attempts: for one-shot work that a busy cluster or a leader
// election may refuse for a while, such as provisioning at start.
func Retry(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		var perm permanent
		switch {
		case err == nil:
			return nil
		case errors.As(err, &perm):
			return perm.err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		wait := restartBackoff(attempt)
		log.Warn(what+" failed, retrying", "attempt", attempt, "err", err, "in", wait)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// restartBackoff is the wait before attempt n (from 1) starts again:
// growing, and capped so that recovery is noticed within seconds.
func restartBackoff(attempt int) time.Duration {
	return min(time.Duration(attempt)*250*time.Millisecond, 5*time.Second)
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// Handler processes one message. Returning nil acks it; an error has it
// redelivered after a backoff, until the consumer gives up and dead-letters
// it. A handler must be idempotent: it may see a message more than once.
type Handler func(ctx context.Context, msg jetstream.Msg) error

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

// ConsumerConfig describes a durable consumer and how its handler runs.
type ConsumerConfig struct {
	Stream         string
	Durable        string
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
	// AckWait is how long a message may go unacked before it is
	// redelivered; the runner keeps it from expiring while the handler
	// works (default 30s).
	AckWait time.Duration
	// Concurrency is how many messages are handled at once (default 1).
	Concurrency int
}

// Runner runs a Handler over a durable JetStream consumer.
type Runner struct {
	js      jetstream.JetStream
	cfg     ConsumerConfig
	handler Handler
	log     *slog.Logger
}

// NewRunner returns a runner for handler wrapped in middleware, outermost first.
func NewRunner(js jetstream.JetStream, cfg ConsumerConfig, log *slog.Logger, handler Handler, middleware ...Middleware) *Runner {
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 5
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	for i := len(middleware) - 1; i >= 0; i-- {
		handler = middleware[i](handler)
	}
	return &Runner{js: js, cfg: cfg, handler: handler, log: log.With("consumer", cfg.Durable)}
}

// Run consumes until ctx ends, then waits for the handlers in flight. A
// JetStream error (a request timing out on a busy cluster, the consumer
// deleted) starts it again after a backoff.
func (r *Runner) Run(ctx context.Context) error {
	return RunRestarting(ctx, r.log, "consumer", r.run)
}

func (r *Runner) run(ctx context.Context) error {
	deliver := jetstream.DeliverAllPolicy
	if r.cfg.DeliverNew {
		deliver = jetstream.DeliverNewPolicy
	}
	cons, err := r.js.CreateOrUpdateConsumer(ctx, r.cfg.Stream, jetstream.ConsumerConfig{
		Durable:        r.cfg.Durable,
		FilterSubjects: r.cfg.FilterSubjects,
		DeliverPolicy:  deliver,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        r.cfg.AckWait,
		// The runner dead-letters at MaxDeliver itself; the server must not
		// drop a message silently before it gets the chance.
		MaxDeliver:    -1,
		MaxAckPending: r.cfg.Concurrency * 4,
	})
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", r.cfg.Durable, r.cfg.Stream, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.Concurrency))
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
	for {
		msg, err := iter.Next()
		if err != nil {
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

func (r *Runner) handle(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		r.log.Error("no metadata, dropping", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	err = r.runHandler(ctx, msg)
	if err == nil {
		if err := msg.Ack(); err != nil {
			r.log.Warn("ack failed", "seq", meta.Sequence.Stream, "err", err)
		}
		return
	}
	if ctx.Err() != nil {
		// Stopping: leave the message for whoever consumes next.
		_ = msg.Nak()
		return
	}
	var perm permanent
	if n := int(meta.NumDelivered); n < r.cfg.MaxDeliver && !errors.As(err, &perm) {
		delay := r.cfg.Backoff[min(n, len(r.cfg.Backoff))-1]
		r.log.Warn("handler failed, retrying", "seq", meta.Sequence.Stream, "delivery", n, "in", delay, "err", err)
		_ = msg.NakWithDelay(delay)
		return
	}
	if dlErr := r.deadLetter(ctx, msg, meta, err); dlErr != nil {
		r.log.Error("dead-letter failed, retrying", "seq", meta.Sequence.Stream, "err", dlErr)
		_ = msg.NakWithDelay(r.cfg.Backoff[len(r.cfg.Backoff)-1])
		return
	}
	r.log.Error("handler gave up, dead-lettered", "seq", meta.Sequence.Stream, "deliveries", meta.NumDelivered, "err", err)
	_ = msg.Term()
}

// runHandler runs the handler, telling the server the message is still in
// progress so that a slow handler does not get it redelivered elsewhere.
func (r *Runner) runHandler(ctx context.Context, msg jetstream.Msg) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
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
	}()
	return r.handler(ctx, msg)
}

// Headers on a dead-lettered message, beside the original ones.
const (
	HeaderDeadConsumer   = "Toolgate-Consumer"
	HeaderDeadSubject    = "Toolgate-Subject"
	HeaderDeadStreamSeq  = "Toolgate-Stream-Seq"
	HeaderDeadDeliveries = "Toolgate-Deliveries"
	HeaderDeadError      = "Toolgate-Error"
)

func (r *Runner) deadLetter(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, cause error) error {
	dl := nats.NewMsg(wire.DeadLetterSubject(r.cfg.Durable))
	dl.Data = msg.Data()
	for k, v := range msg.Headers() {
		if k != jetstream.MsgIDHeader {
			dl.Header[k] = v
		}
	}
	dl.Header.Set(HeaderDeadConsumer, r.cfg.Durable)
	dl.Header.Set(HeaderDeadSubject, msg.Subject())
	dl.Header.Set(HeaderDeadStreamSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
	dl.Header.Set(HeaderDeadDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	dl.Header.Set(HeaderDeadError, cause.Error())
	_, err := r.js.PublishMsg(ctx, dl, jetstream.WithMsgID(fmt.Sprintf("%s:%d", r.cfg.Durable, meta.Sequence.Stream)))
	return err
}

// RunRestarting runs run until ctx ends, starting it again after a backoff
// whenever it fails, unless with a Permanent error.
func RunRestarting(ctx context.Context, log *slog.Logger, what string, run func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := run(ctx)
		var perm permanent
		switch {
		case errors.As(err, &perm):
			return perm.err
		case ctx.Err() != nil:
			return nil
		}
		wait := min(time.Duration(attempt)*250*time.Millisecond, 5*time.Second)
		log.Warn(what+" stopped, starting again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

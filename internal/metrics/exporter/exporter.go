// Package exporter feeds a toolgate process's toolgate_* metrics (package
// metrics) from the bus: the Exporter counts every event of TOOL_EVENTS
// into metrics.Metrics, PendingApprovals follows the process's watch of
// the tool_calls bucket, and ConsumerLag reads the durable consumers'
// positions at scrape time. It reads the bus over a bus.Conn, through the
// feeds of internal/bus/views and consumer.Durables, and imports no
// nats.go. Package metrics says how to aggregate what it exports across
// replicas.
package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
	"golang.org/x/sync/errgroup"
)

// ExporterConfig tunes an Exporter.
type ExporterConfig struct {
	// FromStart counts every event still in TOOL_EVENTS, not only those
	// published after the exporter started. Counters are meant to be read
	// with rate(), for which starting from zero is right; replaying the
	// stream is for tests and one-off inspection.
	FromStart bool
	// Feed, when set, is the process's shared watch of the tool_calls
	// bucket, which the pending-approvals gauge then follows (the process
	// runs it); otherwise the exporter watches the bucket itself.
	Feed *views.CallsFeed
	// Events, when set, is the process's feed of TOOL_EVENTS, which the
	// event counter then follows (the process runs it); otherwise the
	// exporter has an ordered consumer of its own.
	Events *views.EventsFeed
}

// Exporter keeps a process's toolgate_* metrics up to date: it counts
// every event of TOOL_EVENTS once (from the process's feed of them, or an
// ordered consumer of its own), a KV watch keeps the pending-approvals
// gauge, and consumer lag is read at scrape time. See package metrics for
// how to aggregate them across replicas.
type Exporter struct {
	conn    *bus.Conn
	cfg     ExporterConfig
	log     *slog.Logger
	metrics *metrics.Metrics
	pending *PendingApprovals
	feed    *views.CallsFeed // the exporter's own, when it runs one

	seq   atomic.Uint64 // stream sequence of the last event counted
	ready chan struct{}
}

// NewExporter registers the metrics with reg (sharing them with any other
// caller of metrics.For(reg)), and the pending-approvals gauge over the
// calls bucket of b and the consumer-lag collector; Run feeds them. One
// Exporter per registry: a second one's collectors are refused as
// already registered.
func NewExporter(conn *bus.Conn, b *bus.Buckets, reg prometheus.Registerer, cfg ExporterConfig, log *slog.Logger) (*Exporter, error) {
	m, err := metrics.For(reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	pending := NewPendingApprovals(m)
	var own *views.CallsFeed
	feed := cfg.Feed
	if feed == nil {
		own = views.NewCallsFeed(conn.JetStream(), b.Calls)
		feed = own
	}
	feed.Add(pending.View())
	for _, c := range []prometheus.Collector{pending, NewConsumerLag(conn, log)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return &Exporter{conn: conn, cfg: cfg, log: log, metrics: m, pending: pending, feed: own, ready: make(chan struct{})}, nil
}

// Metrics returns the counters the exporter feeds.
func (x *Exporter) Metrics() *metrics.Metrics { return x.metrics }

// Ready is closed once the event consumer exists and the pending gauge has
// read the bucket: from then on, every event published is counted.
func (x *Exporter) Ready() <-chan struct{} { return x.ready }

// Sequence is the TOOL_EVENTS stream sequence of the last event counted.
func (x *Exporter) Sequence() uint64 { return x.seq.Load() }

// Run counts events and watches the bucket until ctx ends, then waits for
// the event counted last. Either restarts after a JetStream error
// (consumer.RunRestarting), the event counter where it stopped.
func (x *Exporter) Run(ctx context.Context) error {
	consuming := make(chan struct{})
	var once sync.Once
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return consumer.RunRestarting(gctx, x.log, "metrics: event counter", func(ctx context.Context) error {
			return x.countEvents(ctx, func() { once.Do(func() { close(consuming) }) })
		})
	})
	if x.feed != nil {
		g.Go(func() error { return x.feed.Run(gctx, x.log) })
	}
	g.Go(func() error {
		for _, c := range []<-chan struct{}{consuming, x.pending.Synced()} {
			select {
			case <-c:
			case <-gctx.Done():
				return nil
			}
		}
		close(x.ready)
		return nil
	})
	return g.Wait()
}

// countEvents counts events until ctx ends; started is called once every
// event to come will be counted.
func (x *Exporter) countEvents(ctx context.Context, started func()) error {
	var from uint64 // 0: those published from now on
	if x.cfg.FromStart {
		from = 1
	}
	if seq := x.seq.Load(); seq > 0 {
		// Started again: on from the last event counted, neither again nor
		// skipping what came meanwhile.
		from = seq + 1
	}
	var err error
	if x.cfg.Events != nil {
		err = x.cfg.Events.Follow(ctx, from, started, x.count)
	} else {
		err = views.FollowEvents(ctx, x.conn.JetStream(), from, started, x.count)
	}
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (x *Exporter) count(seq uint64, subject string, data []byte) {
	head, err := wire.DecodeEventHead(data)
	if err != nil {
		x.log.Error("metrics: undecodable event", "subject", subject, "seq", seq, "err", err)
	} else {
		x.metrics.Observe(observed(head))
	}
	x.seq.Store(seq)
}

// observed is an event's head as a wire.Event holding only its fields:
// what Observe reads (TestObserved_HoldsWhatObserveReads).
func observed(h *wire.EventHead) *wire.Event {
	ev := &wire.Event{Event: h.Event, From: h.From, To: h.To, At: h.At}
	if e := h.Entry; e != nil {
		ev.Entry = &machine.Entry{ToolName: e.ToolName, Team: e.Team, RequestedAt: e.RequestedAt, DecisionTime: e.DecisionTime,
			LastAttemptTime: e.LastAttemptTime, Cost: e.Cost}
	}
	return ev
}

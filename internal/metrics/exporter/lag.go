package exporter

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
)

// ConsumerLag exports how far behind each durable consumer of toolgate's
// streams is: toolgate_consumer_pending_messages (in the stream, not yet
// delivered), toolgate_consumer_ack_pending_messages (delivered, not yet
// acknowledged) and toolgate_consumer_redelivered_messages, labelled by
// stream and consumer. The relay's consumer reads the tool_calls bucket's
// stream; the notifier's fan-out and the budget settler read TOOL_EVENTS.
// The analytics keep a checkpoint instead (metrics.NewAnalyticsLag).
//
// The numbers are the server's, read from consumer info at scrape time
// (one request per stream), so every replica reports the same values.
// Ephemeral consumers (KV watchers, the Exporter's ordered consumer) are
// left out: their lag is one process's business.
type ConsumerLag struct {
	conn    *bus.Conn
	streams []string
	timeout time.Duration
	log     *slog.Logger

	pending, ackPending, redelivered *prometheus.Desc
}

var _ prometheus.Collector = (*ConsumerLag)(nil)

// NewConsumerLag returns the collector for toolgate's streams (and any
// others named).
func NewConsumerLag(conn *bus.Conn, log *slog.Logger, extraStreams ...string) *ConsumerLag {
	labels := []string{"stream", "consumer"}
	return &ConsumerLag{
		conn:    conn,
		streams: append([]string{"KV_" + wire.CallsBucket, wire.EventsStream}, extraStreams...),
		timeout: 2 * time.Second,
		log:     log,
		pending: prometheus.NewDesc(metrics.NameConsumerPending,
			"Messages in the stream a durable consumer has not been delivered yet (num_pending).", labels, nil),
		ackPending: prometheus.NewDesc(metrics.NameConsumerAckPending,
			"Messages delivered to a durable consumer and not yet acknowledged (num_ack_pending).", labels, nil),
		redelivered: prometheus.NewDesc(metrics.NameConsumerRedeliveries,
			"Messages delivered to a durable consumer more than once and not yet acknowledged (num_redelivered).", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *ConsumerLag) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.ackPending
	ch <- c.redelivered
}

// Collect implements prometheus.Collector. A stream that cannot be read
// (not provisioned yet, the cluster electing a leader) is left out of the
// scrape rather than failing it: the other metrics matter more.
func (c *ConsumerLag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for _, name := range c.streams {
		durables, err := consumer.Durables(ctx, c.conn.JetStream(), name)
		for _, d := range durables {
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(d.Pending), name, d.Consumer)
			ch <- prometheus.MustNewConstMetric(c.ackPending, prometheus.GaugeValue, float64(d.AckPending), name, d.Consumer)
			ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, float64(d.Redelivered), name, d.Consumer)
		}
		if err != nil {
			c.log.Debug("consumer lag: stream's consumers not readable", "stream", name, "err", err)
		}
	}
}

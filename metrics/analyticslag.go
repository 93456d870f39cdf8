package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NewAnalyticsLag exports toolgate_analytics_lag_events: how many events
// of TOOL_EVENTS the analytics have yet to take in (analytics.Lag), read
// at scrape time. A scrape that cannot read it leaves it out.
func NewAnalyticsLag(lag func(context.Context) (uint64, error), log *slog.Logger) prometheus.Collector {
	return &analyticsLag{lag: lag, log: log, desc: prometheus.NewDesc(NameAnalyticsLag,
		"Events in TOOL_EVENTS after the analytics' checkpoint: not yet in the aggregates.", nil, nil)}
}

type analyticsLag struct {
	lag  func(context.Context) (uint64, error)
	log  *slog.Logger
	desc *prometheus.Desc
}

func (c *analyticsLag) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *analyticsLag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := c.lag(ctx)
	if err != nil {
		c.log.Debug("analytics lag: not readable", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}

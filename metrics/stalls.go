package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NewConsumerStalls exports toolgate_consumer_stalled_seconds: for each
// durable consumer the process runs, how long it has got nothing while
// its stream held messages for it (0 while it flows), read from stalled
// at scrape time. A consumer stalled past its bound is bound again by the
// process, which logs it; the gauge shows what the process saw.
func NewConsumerStalls(stalled func() map[string]time.Duration) prometheus.Collector {
	return &consumerStalls{stalled: stalled, desc: prometheus.NewDesc(NameConsumerStalled,
		"How long a durable consumer this process runs has got nothing while its stream held messages for it (0: it flows).", []string{"consumer"}, nil)}
}

type consumerStalls struct {
	stalled func() map[string]time.Duration
	desc    *prometheus.Desc
}

func (c *consumerStalls) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *consumerStalls) Collect(ch chan<- prometheus.Metric) {
	for name, d := range c.stalled() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, d.Seconds(), name)
	}
}

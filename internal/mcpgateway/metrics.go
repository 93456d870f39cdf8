package mcpgateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// gauges are the gateway's metrics, in a registry of its own: a process
// may run more than one gateway (tests do).
type gauges struct {
	reg       *prometheus.Registry
	sessions  prometheus.Gauge
	upstreams prometheus.Gauge
}

func newGauges() *gauges {
	g := &gauges{
		reg: prometheus.NewRegistry(),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolgate_gateway_sessions",
			Help: "MCP sessions the gateway serves now (stdio and HTTP)."}),
		upstreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolgate_gateway_upstream_processes",
			Help: "Upstream MCP server processes (stdio commands) the gateway runs now."}),
	}
	g.reg.MustRegister(g.sessions, g.upstreams)
	return g
}

// handler serves the metrics in Prometheus's text format.
func (g *gauges) handler() http.Handler {
	return promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{})
}

// Metrics serves the gateway's metrics (toolgate_gateway_sessions,
// toolgate_gateway_upstream_processes) in Prometheus's text format.
// Handler serves them too, at GET /metrics.
func (gw *Gateway) Metrics() http.Handler { return gw.metrics.handler() }

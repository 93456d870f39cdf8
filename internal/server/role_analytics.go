package server

import (
	"context"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/metrics"
)

// prepareAnalytics builds the exporter behind the toolgate_* Prometheus
// metrics, registered in the process's registry, whose pending-approvals
// gauge follows the process's feed of tool_calls.
func prepareAnalytics(d *deps, log *slog.Logger) error {
	x, err := metrics.NewExporter(d.conn, d.buckets, d.registry, metrics.ExporterConfig{Feed: d.feed, Events: d.events}, log)
	d.exporter = x
	return err
}

// runAnalytics runs the analytics subscriber, which keeps the aggregates
// behind GET /v1/analytics and `toolgate stats` in the tool_analytics
// bucket, and the exporter.
//
// Any number of processes may run the role: each reads every event once,
// from the process's events feed, for the subscriber and the exporter
// alike; the aggregates take each event once whichever process applies
// it, and each process exports the metrics whole (see package metrics on
// aggregating them across replicas).
func runAnalytics(ctx context.Context, d *deps, log *slog.Logger) error {
	an := d.analytics // a process that serves the report has it open already
	if an == nil {
		var err error
		if an, err = analytics.Open(ctx, d.conn, analytics.Config{Replicas: d.cfg.Replicas, Events: d.events, Log: log}); err != nil {
			return err
		}
	}
	if err := d.registry.Register(metrics.NewAnalyticsLag(an.Lag, log)); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.exporter.Run(ctx) })
	g.Go(func() error { return an.Run(ctx) })
	return g.Wait()
}

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/metrics/exporter"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
)

// prepareAnalytics builds the exporter behind the toolgate_* Prometheus
// metrics, registered in the process's registry, whose pending-approvals
// gauge follows the process's feed of tool_calls.
func prepareAnalytics(d *deps, log *slog.Logger) error {
	x, err := exporter.NewExporter(d.conn, d.buckets, d.registry, exporter.ExporterConfig{Feed: d.feed, Events: d.events}, log)
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

// RebuildAnalytics re-derives every analytics aggregate from the start of
// TOOL_EVENTS into a new generation and puts it in force once it has
// caught up (`toolgate analytics rebuild`, with toolgate's own
// credential); running analytics roles switch to it. It binds the
// analytics bucket as it is, and creates it with replicas only if there
// is none, so that a cluster's replicas are never changed from here. It
// returns the generation in force and how many events the stream held.
func RebuildAnalytics(ctx context.Context, js jetstream.JetStream, replicas int) (generation, events uint64, err error) {
	stream, err := js.Stream(ctx, wire.EventsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, 0, fmt.Errorf("no %s stream: is toolgate serving there?", wire.EventsStream)
	} else if err != nil {
		return 0, 0, err
	}
	kv, err := js.KeyValue(ctx, wire.AnalyticsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = bus.ProvisionAnalytics(ctx, js, replicas)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("bind %s bucket: %w", wire.AnalyticsBucket, err)
	}
	if generation, err = analytics.New(bus.NewConn(js), stores.NewAnalyticsStore(js, kv), analytics.Config{}).Rebuild(ctx); err != nil {
		return 0, 0, err
	}
	if info, err := stream.Info(ctx); err == nil {
		events = info.State.Msgs
	}
	return generation, events, nil
}

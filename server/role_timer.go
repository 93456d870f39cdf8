package server

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/worker"
)

// prepareTimer builds the timer, which follows the process's feed of
// tool_calls.
func prepareTimer(d *deps, log *slog.Logger) error {
	mx, err := metrics.For(d.registry)
	if err != nil {
		return err
	}
	d.timer = worker.NewTimer(d.js, d.buckets.Calls, d.gate, log,
		worker.WithUnclaimedRequeue(d.cfg.RequeueUnclaimed), worker.WithRetention(d.cfg.Retention, d.gate), worker.WithMetrics(mx),
		worker.WithFeed(d.feed))
	return nil
}

// runTimer acts on every deadline of the bucket: approval timeouts,
// scheduled starts, executor leases, runnable calls nobody claims and the
// end of a finished call's retention. Any number of processes may run
// it; each acts on every deadline, and compare-and-set and de-duplication
// make the second firing harmless.
func runTimer(ctx context.Context, d *deps, _ *slog.Logger) error { return d.timer.Run(ctx) }

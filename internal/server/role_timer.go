package server

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/internal/worker"
)

// prepareTimer builds the timer, which follows the process's feed of
// tool_calls and tells the time by the process's clock (deps.clock), as
// the application layer it commands does.
func prepareTimer(d *deps, log *slog.Logger) error {
	d.timer = worker.NewTimer(d.conn, d.buckets, d.gate.Timer(), log, worker.WithRetention(d.cfg.Retention, d.gate.Timer()), worker.WithFeed(d.feed), worker.WithClock(d.clock))
	return nil
}

// runTimer acts on every deadline of the bucket: approval timeouts,
// reminders and escalations, the leases of calls on their last attempt
// and the end of a finished call's retention. Any number of processes may
// run it; each acts on every deadline, and compare-and-set makes the
// second firing harmless.
func runTimer(ctx context.Context, d *deps, _ *slog.Logger) error { return d.timer.Run(ctx) }

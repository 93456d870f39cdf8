package server

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/metrics"
)

// prepareNotifier makes the process's notifier and its consumer of the
// events, before the process serves: the consumer delivers only the
// events after it, and a call asked once the process serves must be told.
func prepareNotifier(d *deps, log *slog.Logger) error {
	mx, err := metrics.For(d.registry)
	if err != nil {
		return err
	}
	issue := worker.DecisionTokenIssuerFunc(func(ctx context.Context, pendingID, approver string) (string, string, error) {
		t, err := d.gate.Links().Issue(ctx, gate.System, pendingID, approver)
		return t.Approve, t.Reject, err
	})
	d.notifier = worker.NewNotifier(d.conn, d.engine, mx, log, worker.WithDecisionTokens(issue))
	ctx, cancel := context.WithTimeout(context.Background(), prepareWait)
	defer cancel()
	return d.notifier.CreateConsumer(ctx)
}

// runNotifier tells the channels each call's policy names (webhook, Slack,
// ntfy) that the call waits for a human, and of the decision. Any number of
// processes may run it: they share its consumers, so each event is
// delivered once per channel.
//
// The channels come from the policy in force (the process's engine), so
// that a channel added while it runs is used at once.
func runNotifier(ctx context.Context, d *deps, _ *slog.Logger) error {
	return d.notifier.Run(ctx)
}

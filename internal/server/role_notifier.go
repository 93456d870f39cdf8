package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/worker"
)

// runNotifier tells the channels each call's policy names (webhook, Slack,
// ntfy) that the call waits for a human, and of the decision. Any number of
// processes may run it: they share its consumers, so each event is
// delivered once per channel.
//
// The channels come from the policy engine, which the intake role keeps
// current; in a process without intake the notifier follows the stored
// policy itself, so that a channel added while it runs is used at once.
func runNotifier(ctx context.Context, d *deps, log *slog.Logger) error {
	mx, err := metrics.For(d.registry)
	if err != nil {
		return err
	}
	issue := worker.DecisionTokenIssuerFunc(func(ctx context.Context, pendingID, approver string) (string, string, error) {
		t, err := d.gate.IssueDecisionTokens(ctx, gate.System, pendingID, approver)
		return t.Approve, t.Reject, err
	})
	n := worker.NewNotifier(d.js, d.engine, mx, log, worker.WithDecisionTokens(issue))
	if d.roles.keepsPolicy() {
		return n.Run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan error, 1)
	go func() { followed <- d.policies.Follow(ctx, d.engine, log) }()
	err = n.Run(ctx)
	cancel() // Run may have failed with ctx still live: stop following too
	return errors.Join(err, <-followed)
}

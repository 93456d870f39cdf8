package server

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
)

// prepareReviewer makes the process's reviewer and its consumer of the
// asks, before the process serves, as prepareNotifier does.
func prepareReviewer(d *deps, log *slog.Logger) error {
	answers := metrics.NewReviewerAnswers()
	if err := d.registry.Register(answers.Collector()); err != nil {
		return err
	}
	d.reviewer = worker.NewReviewer(d.conn, d.engine, reviewGate{d.gate}, answers, log)
	ctx, cancel := context.WithTimeout(context.Background(), prepareWait)
	defer cancel()
	return d.reviewer.CreateConsumer(ctx)
}

// runReviewer sends each asked call to the automated reviewers its policy
// names (reviewers:) and hands their answers to gate as toolgate's own
// reviewer role (gate.Reviewer). Any number of processes may run it: they
// share its consumer, so each ask is reviewed once.
//
// The reviewers come from the policy in force (the process's engine).
func runReviewer(ctx context.Context, d *deps, _ *slog.Logger) error {
	return d.reviewer.Run(ctx)
}

// reviewGate is gate as the reviewer role reaches it: as gate.Reviewer.
type reviewGate struct{ s *gate.Service }

func (g reviewGate) ReviewCall(ctx context.Context, r wire.ReviewCallRequest) (*wire.ReviewRequest, error) {
	return g.s.ReviewCall(ctx, gate.Reviewer, r)
}

func (g reviewGate) Review(ctx context.Context, r wire.ReviewDecision) (*wire.ReviewReply, error) {
	return g.s.Review(ctx, gate.Reviewer, r)
}

package gate

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Runtime is what a process runs beside its Service's use cases, over the
// same stores: the views of tool_calls it keeps on its feed, the
// followers it runs until it stops, the receipt key it registers at start,
// the gauge of its work queue and the masking of the events its relay
// publishes. internal/server wires it; transports call only the Service.
type Runtime struct{ s *Service }

// Runtime returns the plumbing of the process s serves in.
func (s *Service) Runtime() Runtime { return Runtime{s: s} }

// CallsView is the Service's index of tool_calls as a view of the
// process's views.CallsFeed. Processes that serve lists (intake, http) keep
// it.
func (r Runtime) CallsView(log *slog.Logger) views.CallsView { return r.s.index.View(log) }

// WorkView is the queue of runnable calls TakeWork hands out, as a view of
// the process's feed of tool_calls: a process that serves executors keeps
// it.
func (r Runtime) WorkView() views.CallsView { return r.s.work.View() }

// RetiredView is the view of tool_calls that shows FollowArchive the
// calls retired before it sees them archived.
func (r Runtime) RetiredView() views.CallsView { return r.s.archivedIDs.View() }

// RunnableCalls is how many calls this process's work queue holds ready
// for an executor, not yet claimed (0 while it does not follow the
// bucket).
func (r Runtime) RunnableCalls() int {
	ready, _, _ := r.s.work.Ready()
	return ready
}

// MaskedOrNil is e with its secrets masked, as event subscribers see it,
// or nil when e has no secret to mask: the relay then publishes the event
// it encoded for the caller to subscribers too.
func (r Runtime) MaskedOrNil(e *machine.Entry) *machine.Entry {
	if c, masked := r.s.masked(e); masked {
		return c
	}
	return nil
}

// FollowArchive follows the ids of the calls in the archive until ctx
// ends, so that a submit asks the archive only about a call it may hold.
// A process that submits calls runs it, with RetiredView on its feed of
// tool_calls.
func (r Runtime) FollowArchive(ctx context.Context, log *slog.Logger) error {
	return r.s.archivedIDs.Follow(ctx, log)
}

// FollowWithdrawals ends the requests for work waiting on this process
// whose executor withdrew them through another, until ctx ends. A process
// that serves the request API runs it.
func (r Runtime) FollowWithdrawals(ctx context.Context) error {
	s := r.s
	return s.conn.Listen(ctx, wire.WithdrawSubject, func(data []byte) {
		var w wire.Withdrawal
		if json.Unmarshal(data, &w) == nil {
			s.takers.withdraw(w.Holder, w.Tools)
		}
	})
}

// RegisterReceiptKey records this process's receipt key among the
// published ones; a process calls it at start, before it signs.
func (r Runtime) RegisterReceiptKey(ctx context.Context) error {
	s := r.s
	if s.signer == nil {
		return nil
	}
	return s.receiptKeys.Register(ctx, s.signer.PublicKey(), s.now())
}

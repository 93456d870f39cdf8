package gate

import (
	"context"

	"github.com/toolgate/toolgate/machine"
)

// Timer is the commands a call's deadlines give, over the Service's
// stores: no actor gives them, so they are no use case of a transport's.
// internal/worker's Timer gives them when a deadline falls due.
type Timer struct{ s *Service }

// Timer returns the commands of the deadlines of the calls s serves.
func (s *Service) Timer() Timer { return Timer{s: s} }

// Expire handles a pending call whose approval deadline has passed.
func (t Timer) Expire(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return t.s.observe(t.s.m.Expire(ctx, pendingID))
}

// Remind reminds the approvers of a call still pending before its
// deadline (at the call's reminderAt).
func (t Timer) Remind(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return t.s.observe(t.s.m.Remind(ctx, pendingID))
}

// Escalate widens who may decide a call nobody has decided by its next
// escalation tier's time.
func (t Timer) Escalate(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return t.s.observe(t.s.m.Escalate(ctx, pendingID))
}

// AbandonLease ends a running call whose executor's lease ran out and
// that no other executor may take over, its outcome unknown.
func (t Timer) AbandonLease(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return t.s.observe(t.s.m.AbandonLease(ctx, pendingID))
}

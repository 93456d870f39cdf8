package gate

import (
	"context"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Rerun runs again, once, a call whose outcome is unknown, as a person
// who may decide it asks: the new call (machine.Machine.Rerun).
func (s *Service) Rerun(ctx context.Context, a Actor, r wire.RerunRequest) (*machine.Entry, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	if err := a.require("run calls again", wire.RoleApprover); err != nil {
		return nil, err
	}
	by, err := a.as(r.By)
	if err != nil {
		return nil, err
	}
	e, err := s.observe(s.m.Rerun(ctx, r.PendingID, machine.RerunRequest{By: by, Identity: a.Identity, Groups: a.Groups, Reason: r.Reason}))
	return s.shown(a, e), s.shownErr(a, err)
}

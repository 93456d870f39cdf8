package gate

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Analytics returns the analytics report over the r.Hours ending now, to
// viewers and approvers: what GET /v1/analytics serves, through the
// request API, for a credential that may not read toolgate's buckets
// (the CLI's `stats`).
func (s *Service) Analytics(ctx context.Context, a Actor, r wire.AnalyticsRequest) (json.RawMessage, error) {
	if err := a.require("read analytics", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	if r.Hours < 0 || r.Hours > wire.MaxAnalyticsHours {
		return nil, fmt.Errorf("%w: hours: must be 1 to %d, got %d", machine.ErrInvalid, wire.MaxAnalyticsHours, r.Hours)
	}
	if s.analytics == nil {
		return nil, fmt.Errorf("%w: this toolgate reports no analytics", machine.ErrNotFound)
	}
	return s.analytics(ctx, r.Hours)
}

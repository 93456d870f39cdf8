package gate

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Analytics returns the analytics report over the r.Hours ending at
// r.Until (default now), to viewers and approvers: GET /v1/analytics, and
// through the request API for a credential that may not read toolgate's
// buckets (the CLI's `stats`). Analytics it cannot read now are refused
// as unavailable (wire.ErrUnavailable): asked again, they may be.
func (s *Service) Analytics(ctx context.Context, a Actor, r wire.AnalyticsRequest) (json.RawMessage, error) {
	if err := a.require("read analytics", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	switch r.Resolution {
	case "", wire.AnalyticsByHour:
		if r.Hours < 0 || r.Hours > wire.MaxAnalyticsHours {
			return nil, fmt.Errorf("%w: hours: must be 1 to %d, got %d", machine.ErrInvalid, wire.MaxAnalyticsHours, r.Hours)
		}
	case wire.AnalyticsByMinute:
		if r.Hours < 0 || r.Hours > wire.MaxAnalyticsMinuteHours {
			return nil, fmt.Errorf("%w: hours: must be 1 to %d at minute resolution, got %d", machine.ErrInvalid, wire.MaxAnalyticsMinuteHours, r.Hours)
		}
	default:
		return nil, fmt.Errorf("%w: resolution: must be %s or %s, got %q", machine.ErrInvalid, wire.AnalyticsByHour, wire.AnalyticsByMinute, r.Resolution)
	}
	if r.Until < 0 {
		return nil, fmt.Errorf("%w: until: must be epoch milliseconds, got %d", machine.ErrInvalid, r.Until)
	}
	if s.analytics == nil {
		return nil, fmt.Errorf("%w: this toolgate reports no analytics", machine.ErrNotFound)
	}
	report, err := s.analytics(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("analytics %w: %v", wire.ErrUnavailable, err)
	}
	return report, nil
}

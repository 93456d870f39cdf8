package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// Analytics returns the analytics report (what GET /v1/analytics serves)
// over r.Hours ending at r.Until (0: a day ending now).
func (c *Client) Analytics(ctx context.Context, r wire.AnalyticsRequest) (*wire.AnalyticsReport, error) {
	var reply wire.AnalyticsReport
	if err := c.request(ctx, wire.EndpointAnalytics, r, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

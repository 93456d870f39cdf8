package client

import (
	"context"
	"encoding/json"

	"github.com/toolgate/toolgate/wire"
)

// Analytics returns the analytics report (what GET /v1/analytics serves)
// over the hours ending now (0: a day), as JSON: package analytics'
// Report, which the SDK does not link.
func (c *Client) Analytics(ctx context.Context, hours int) (json.RawMessage, error) {
	var reply json.RawMessage
	err := c.request(ctx, wire.EndpointAnalytics, wire.AnalyticsRequest{Hours: hours}, &reply)
	return reply, err
}

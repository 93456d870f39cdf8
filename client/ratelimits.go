package client

import (
	"context"
	"encoding/json"

	"github.com/toolgate/toolgate/wire"
)

// RateLimits returns the rate rules of the policy in force, each with its
// counters that hold a slot now (a viewer's or approver's credential).
func (c *Client) RateLimits(ctx context.Context) (wire.RateLimitsReply, error) {
	var reply wire.RateLimitsReply
	err := c.request(ctx, wire.EndpointRateLimits, wire.RateLimitsRequest{}, &reply)
	return reply, err
}

// Analytics returns the analytics report (what GET /v1/analytics serves)
// over the hours ending now (0: a day), as JSON: package analytics'
// Report, which the SDK does not link.
func (c *Client) Analytics(ctx context.Context, hours int) (json.RawMessage, error) {
	var reply json.RawMessage
	err := c.request(ctx, wire.EndpointAnalytics, wire.AnalyticsRequest{Hours: hours}, &reply)
	return reply, err
}

package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// RateLimits returns the rate rules of the policy in force, each with its
// counters that hold a slot now (a viewer's or approver's credential).
func (c *Client) RateLimits(ctx context.Context) (wire.RateLimitsReply, error) {
	var reply wire.RateLimitsReply
	err := c.request(ctx, wire.EndpointRateLimits, wire.RateLimitsRequest{}, &reply)
	return reply, err
}

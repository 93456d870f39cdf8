package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// Recheck asks whether the policy in force now denies the call pendingID,
// before running it: an executor may ask of any call, an agent of its
// own. Nothing is written.
func (c *Client) Recheck(ctx context.Context, pendingID string) (*wire.RecheckReply, error) {
	var reply wire.RecheckReply
	if err := c.request(ctx, wire.EndpointRecheck, wire.RecheckRequest{PendingID: pendingID}, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// PolicyExplain evaluates the call r describes through the policy in
// force, dry, and says which rules matched it and why (viewers and
// approvers; nothing is submitted or written). Arguments that are not a
// JSON object, or a bad tool name or permission mode, are refused with an
// error matching machine.ErrInvalid.
func (c *Client) PolicyExplain(ctx context.Context, r wire.PolicyExplainRequest) (*wire.PolicyExplainReply, error) {
	var reply wire.PolicyExplainReply
	if err := c.request(ctx, wire.EndpointPolicyExplain, r, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

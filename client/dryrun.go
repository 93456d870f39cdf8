package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// PolicyDryRun replays the calls recorded in r's window through the
// candidate policy r.Document beside the one in force and says what
// would change (viewers and approvers; nothing is written). A candidate
// that does not parse is refused with an error matching
// machine.ErrInvalid that names each field at fault.
func (c *Client) PolicyDryRun(ctx context.Context, r wire.PolicyDryRunRequest) (*wire.PolicyDryRunReply, error) {
	var reply wire.PolicyDryRunReply
	if err := c.request(ctx, wire.EndpointPolicyDryRun, r, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

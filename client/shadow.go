package client

import (
	"context"

	"github.com/toolgate/toolgate/wire"
)

// PolicyShadow returns the shadow policy (a candidate every submit is
// also evaluated against, enforcing nothing) and its revision, its
// secrets redacted unless r.ShowSecrets (an admin's request). With none
// set, the error matches machine.ErrNotFound.
func (c *Client) PolicyShadow(ctx context.Context, r wire.PolicyGetRequest) (wire.PolicyDocument, error) {
	var doc wire.PolicyDocument
	err := c.request(ctx, wire.EndpointPolicyShadowGet, r, &doc)
	return doc, err
}

// SetPolicyShadow stores a shadow policy, YAML or JSON (admin only). A
// document `policy set` would refuse is refused the same way.
func (c *Client) SetPolicyShadow(ctx context.Context, document string) (wire.PolicyDocument, error) {
	var doc wire.PolicyDocument
	err := c.request(ctx, wire.EndpointPolicyShadowSet, wire.PolicyDocument{Document: document}, &doc)
	return doc, err
}

// ClearPolicyShadow drops the shadow policy (admin only), answering the
// revision it dropped (0: none was set).
func (c *Client) ClearPolicyShadow(ctx context.Context) (wire.PolicyShadowCleared, error) {
	var reply wire.PolicyShadowCleared
	err := c.request(ctx, wire.EndpointPolicyShadowClear, struct{}{}, &reply)
	return reply, err
}

// PromotePolicyShadow puts the shadow policy stored at revision in force
// and drops it (admin only), answering the policy in force. A shadow set
// again since is not promoted: the error matches machine.ErrConflict.
func (c *Client) PromotePolicyShadow(ctx context.Context, revision uint64) (wire.PolicyDocument, error) {
	var doc wire.PolicyDocument
	err := c.request(ctx, wire.EndpointPolicyShadowPromote, wire.PolicyShadowPromoteRequest{Revision: revision}, &doc)
	return doc, err
}

// PolicyShadowReport says what a shadow policy would have changed of the
// calls submitted (viewers and approvers).
func (c *Client) PolicyShadowReport(ctx context.Context, r wire.PolicyShadowReportRequest) (*wire.PolicyShadowReport, error) {
	var reply wire.PolicyShadowReport
	if err := c.request(ctx, wire.EndpointPolicyShadowReport, r, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

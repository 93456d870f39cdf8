package gate

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Policy returns the policy document in force, its secrets redacted
// (policy.Redacted) unless r asks to see them, which only an admin may.
func (s *Service) Policy(ctx context.Context, a Actor, r wire.PolicyGetRequest) (wire.PolicyDocument, error) {
	if err := a.require("read the policy", wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.PolicyDocument{}, err
	}
	if r.ShowSecrets {
		if err := a.require("show the policy's secrets", wire.RoleAdmin); err != nil {
			return wire.PolicyDocument{}, err
		}
	}
	doc, rev, err := s.policies.Get(ctx)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if !r.ShowSecrets {
		doc = policy.Redacted(doc)
	}
	data, err := policy.Marshal(doc)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	return wire.PolicyDocument{Document: string(data), Revision: rev}, nil
}

// DeniedTools says which of r.Tools the policy in force denies whatever a
// call's arguments, so that an agent (or a gateway offering tools to a
// model) can leave them out without reading the policy, which only
// viewers and approvers may. It says no more than submitting a call of
// each tool would. It also names the tools the policy has rules on the
// arguments of without saying which argument they read (Unreadable), with
// the fix, quoting no rule.
func (s *Service) DeniedTools(ctx context.Context, a Actor, r wire.DeniedToolsRequest) (wire.DeniedToolsReply, error) {
	if err := a.require("ask which tools the policy denies", wire.RoleAgent, wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.DeniedToolsReply{}, err
	}
	if len(r.Tools) > wire.MaxDeniedTools {
		return wire.DeniedToolsReply{}, fmt.Errorf("%w: tools: at most %d, got %d", machine.ErrInvalid, wire.MaxDeniedTools, len(r.Tools))
	}
	for i, tool := range r.Tools {
		if !machine.ValidToolName(tool) {
			return wire.DeniedToolsReply{}, fmt.Errorf("%w: tools[%d]: must be 1 to 128 letters, digits, '_' or '-', got %q", machine.ErrInvalid, i, tool)
		}
	}
	reply := wire.DeniedToolsReply{Denied: map[string]string{}}
	if s.limits == nil {
		return reply, nil // no policy engine: nothing is denied outright
	}
	denied, err := s.limits.DeniedTools(r.Team, r.ConversationID, r.PermissionMode, r.Tools)
	if err != nil {
		return wire.DeniedToolsReply{}, err // a bad permission mode: machine.ErrInvalid
	}
	if denied != nil {
		reply.Denied = denied
	}
	if unreadable := s.limits.UnreadableTools(r.Team, r.ConversationID, r.Tools); len(unreadable) > 0 {
		reply.Unreadable = unreadable
	}
	return reply, nil
}

// SetPolicy puts a policy document in force on every replica. A document
// that does not parse or validate is refused, naming each field at fault,
// and the policy in force stays as it was; so is one that holds the
// redaction placeholder where a secret goes (a document read redacted and
// set again), rather than storing the placeholder as the secret. The
// reply is the document stored, redacted.
func (s *Service) SetPolicy(ctx context.Context, a Actor, r wire.PolicyDocument) (wire.PolicyDocument, error) {
	if err := a.require("set the policy", wire.RoleAdmin); err != nil {
		return wire.PolicyDocument{}, err
	}
	doc, err := policy.Parse([]byte(r.Document))
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if err := s.policies.Set(ctx, doc); err != nil {
		return wire.PolicyDocument{}, err
	}
	return s.Policy(ctx, a, wire.PolicyGetRequest{})
}

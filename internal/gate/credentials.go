package gate

import (
	"context"
	"fmt"
	"slices"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Issuer signs a new NATS credential for name in role: its public key and
// its .creds file.
type Issuer func(name string, role wire.Role) (key string, creds []byte, err error)

// Authenticate refuses an actor whose NATS credential was revoked. A
// server that toolgate runs itself refuses such a credential's connection
// too; one it does not (a cluster of nats-servers) learns of it only when
// its configuration is updated, and until then toolgate refuses its
// requests here. Not a use case: the NATS transport asks it before each.
func (s *Service) Authenticate(ctx context.Context, a Actor) error {
	if a.Key == "" {
		return nil
	}
	revoked, err := s.identities.Revoked(ctx, a.Key)
	if err != nil {
		return err
	}
	if revoked {
		return fmt.Errorf("%w: the credential of %s was revoked", machine.ErrForbidden, a.Name)
	}
	return nil
}

// IssueCredential makes a NATS credential for a new identity. A name
// holds one live credential at a time: revoke it before issuing another.
func (s *Service) IssueCredential(ctx context.Context, a Actor, r wire.CredsRequest) (wire.CredsReply, error) {
	if err := a.require("issue credentials", wire.RoleAdmin); err != nil {
		return wire.CredsReply{}, err
	}
	if s.issue == nil {
		return wire.CredsReply{}, fmt.Errorf("%w: this toolgate holds no signing keys (it serves NATS servers it did not start): issue credentials where the keys are", machine.ErrInvalid)
	}
	ids, err := s.identities.List(ctx)
	if err != nil {
		return wire.CredsReply{}, err
	}
	if slices.ContainsFunc(ids, func(id wire.Identity) bool { return id.Name == r.Name && id.RevokedAt == 0 }) {
		return wire.CredsReply{}, fmt.Errorf("%w: %s holds a credential already: revoke it first", machine.ErrExists, r.Name)
	}
	key, creds, err := s.issue(r.Name, r.Role)
	if err != nil {
		return wire.CredsReply{}, fmt.Errorf("%w: %v", machine.ErrInvalid, err)
	}
	id := wire.Identity{Name: r.Name, Role: r.Role, Key: key, IssuedAt: s.now().UnixMilli(), IssuedBy: a.Name}
	if err := s.identities.Add(ctx, id); err != nil {
		return wire.CredsReply{}, err
	}
	return wire.CredsReply{Identity: id, Creds: string(creds)}, nil
}

// Credentials lists the credentials issued, revoked ones too.
func (s *Service) Credentials(ctx context.Context, a Actor, _ struct{}) (wire.IdentitiesReply, error) {
	if err := a.require("list credentials", wire.RoleAdmin); err != nil {
		return wire.IdentitiesReply{}, err
	}
	ids, err := s.identities.List(ctx)
	if ids == nil {
		ids = []wire.Identity{}
	}
	return wire.IdentitiesReply{Items: ids}, err
}

// RevokeCredential revokes every live credential of a name.
func (s *Service) RevokeCredential(ctx context.Context, a Actor, r wire.CredsRequest) (wire.IdentitiesReply, error) {
	if err := a.require("revoke credentials", wire.RoleAdmin); err != nil {
		return wire.IdentitiesReply{}, err
	}
	ids, err := s.identities.List(ctx)
	if err != nil {
		return wire.IdentitiesReply{}, err
	}
	reply := wire.IdentitiesReply{Items: []wire.Identity{}}
	for _, id := range ids {
		if id.Name != r.Name || id.RevokedAt != 0 {
			continue
		}
		got, err := s.identities.Revoke(ctx, id.Key, a.Name, s.now().UnixMilli())
		if err != nil {
			return reply, err
		}
		reply.Items = append(reply.Items, got)
	}
	if len(reply.Items) == 0 {
		return reply, fmt.Errorf("%w: %s holds no live credential", machine.ErrNotFound, r.Name)
	}
	return reply, nil
}

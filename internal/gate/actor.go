package gate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Actor is who asks for a use case: an identity the transport
// authenticated (a NATS credential, an HTTP token), never a name a
// request's body gives. Every use case checks what its actor may do, so
// the rules are the same whichever transport a request came by.
type Actor struct {
	Name  string
	Roles []wire.Role
	// Key is the public key of the NATS credential the actor
	// authenticated with, if it did: a revoked key is refused.
	Key string
	// Identity is who the actor is at the OpenID provider that signed
	// them in, if one did: their decisions record it.
	Identity *machine.Identity
	// Groups are the groups the actor is in, as their sign-in says (the
	// provider's claim, the token file): a group:NAME entry of a call's
	// approvers admits them when NAME is one.
	Groups []string
	// system marks toolgate itself: its own roles in this process, and
	// requests from its own NATS identity. It may act under any name (an
	// executor role names each of its executors).
	system bool
	// reviewer marks toolgate's own reviewer role (Reviewer): it may
	// answer for the policy's automated reviewers, and nothing else.
	reviewer bool
}

// System is toolgate acting on its own behalf.
var System = Actor{Name: "toolgate", Roles: []wire.Role{wire.RoleAdmin}, system: true}

// Can reports whether a holds any of roles; an admin holds them all.
func (a Actor) Can(roles ...wire.Role) bool {
	if slices.Contains(a.Roles, wire.RoleAdmin) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(a.Roles, r) {
			return true
		}
	}
	return false
}

// require refuses a use case to an actor holding none of roles.
func (a Actor) require(what string, roles ...wire.Role) error {
	if a.Name == "" {
		return fmt.Errorf("%w: %s: no authenticated identity", machine.ErrForbidden, what)
	}
	if a.Can(roles...) {
		return nil
	}
	return fmt.Errorf("%w: %s (%s) may not %s: that needs the role %s", machine.ErrForbidden, a.Name, a.rolesString(), what, joinRoles(roles))
}

func (a Actor) rolesString() string {
	if len(a.Roles) == 0 {
		return "no role"
	}
	return joinRoles(a.Roles)
}

func joinRoles(roles []wire.Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// readers are the roles that read calls: an agent its own, the others all.
var readers = []wire.Role{wire.RoleAgent, wire.RoleViewer, wire.RoleApprover, wire.RoleExecutor}

// SeesAll reports whether a may read every call, not only its own.
func (a Actor) SeesAll() bool {
	return a.Can(wire.RoleViewer, wire.RoleApprover, wire.RoleExecutor)
}

// owns reports whether e is a's own call.
func (a Actor) owns(e *machine.Entry) bool { return e.CallerBotID == a.Name }

// seesSecrets reports whether a is handed e's arguments as they are:
// toolgate itself, executors (which run them; the role held, not an
// admin's every role) and the agent that asked (which wrote them). People
// (admins, approvers, viewers, the open inbox's users) read the masked
// view (Service.shown), as the events show it to everyone; a role the
// policy names in reveal: asks for the arguments of one call (Reveal).
func (a Actor) seesSecrets(e *machine.Entry) bool {
	return a.system || slices.Contains(a.Roles, wire.RoleExecutor) || a.owns(e)
}

// as is the name a acts under when a request names by: its own. A
// decision or cancel naming someone else is refused; toolgate itself may
// name anyone.
func (a Actor) as(by string) (string, error) {
	if by == "" || by == a.Name || a.system {
		return cmp.Or(by, a.Name), nil
	}
	return "", fmt.Errorf("%w: by %q: %s acts as itself", machine.ErrForbidden, by, a.Name)
}

// holder is the name a's executor holds a lease under. A credential
// shared by several executor processes tells them apart by the name each
// sends, which is kept under the credential's: holder "worker-2" sent
// with the credential "exec" is "exec/worker-2", so no credential can
// hold, renew or report on another's lease.
func (a Actor) holder(by string) string {
	switch {
	case a.system && by != "":
		return by
	case by == "" || by == a.Name:
		return a.Name
	case strings.HasPrefix(by, a.Name+"/"):
		return by
	default:
		return a.Name + "/" + by
	}
}

package auth

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/toolgate/toolgate/wire"
)

// Endpoints lists the request API endpoints each role may call. An admin
// may call them all.
var Endpoints = map[wire.Role][]string{
	wire.RoleAgent: {
		wire.EndpointSubmit, wire.EndpointGet, wire.EndpointList, wire.EndpointCancel, wire.EndpointCancelConversation,
		wire.EndpointStarted, wire.EndpointHeartbeat, wire.EndpointRetry, wire.EndpointSucceeded, wire.EndpointFailed,
		wire.EndpointDeniedTools, wire.EndpointReceipts, wire.EndpointReceiptsKey, wire.EndpointRecheck, wire.EndpointEvents,
	},
	wire.RoleExecutor: {
		wire.EndpointGet, wire.EndpointList, wire.EndpointWork,
		wire.EndpointStarted, wire.EndpointHeartbeat, wire.EndpointRetry, wire.EndpointSucceeded, wire.EndpointFailed,
		wire.EndpointReceipts, wire.EndpointReceiptsKey, wire.EndpointRecheck,
	},
	wire.RoleApprover: {
		wire.EndpointGet, wire.EndpointList, wire.EndpointDecide, wire.EndpointDecideMatching, wire.EndpointCancel, wire.EndpointCancelConversation,
		wire.EndpointBudgets, wire.EndpointRateLimits, wire.EndpointAnalytics, wire.EndpointPolicyGet, wire.EndpointDeniedTools,
		wire.EndpointGrantsList, wire.EndpointGrantsRevoke, wire.EndpointGrantsPreview,
		wire.EndpointPolicyDryRun, wire.EndpointPolicyExplain, wire.EndpointReceipts, wire.EndpointReceiptsKey,
		wire.EndpointPolicyShadowGet, wire.EndpointPolicyShadowReport, wire.EndpointReveal, wire.EndpointRerun, wire.EndpointEvents,
	},
	wire.RoleViewer: {wire.EndpointGet, wire.EndpointList, wire.EndpointBudgets, wire.EndpointRateLimits, wire.EndpointAnalytics, wire.EndpointPolicyGet, wire.EndpointDeniedTools, wire.EndpointGrantsList,
		wire.EndpointGrantsPreview, wire.EndpointPolicyDryRun, wire.EndpointPolicyExplain, wire.EndpointReceipts, wire.EndpointReceiptsKey,
		wire.EndpointPolicyShadowGet, wire.EndpointPolicyShadowReport, wire.EndpointReveal, wire.EndpointEvents},
}

// events are the subjects of the events, as approvers and viewers hear
// them (not the notification queues, which share the prefix).
const events = "tool.*"

// Permissions is what a role's users may publish and subscribe to, as the
// template of the role's scoped signing key: {{name()}} is the user's name.
func Permissions(role wire.Role) jwt.Permissions {
	var p jwt.Permissions
	p.Sub.Allow.Add(wire.InboxPrefix("{{name()}}") + ".>")
	if role == wire.RoleAdmin {
		p.Pub.Allow.Add(wire.APISubject("*"))
	} else {
		for _, e := range Endpoints[role] {
			p.Pub.Allow.Add(wire.APISubject(e))
		}
	}
	switch role {
	case wire.RoleAgent:
		p.Sub.Allow.Add(wire.EntrySubjectPrefix + "{{name()}}.>")
	case wire.RoleExecutor:
		p.Sub.Allow.Add(wire.CancelSubject)
	case wire.RoleAdmin:
		p.Sub.Allow.Add(wire.EntrySubjectPrefix+">", events, wire.CancelSubject)
	default:
		// Approvers and viewers hear of calls through the events, whose
		// arguments the relay masks; an agent's own announcements carry
		// them as they are, for the agent only.
		p.Sub.Allow.Add(events)
	}
	return p
}

// accounts returns the JWT of every account, by public key. revoked lists
// the public keys of the CLIENTS users no longer trusted.
func (k *Keys) accounts(revoked []string) (map[string]string, error) {
	sys, tg, cl := public(k.System), public(k.Toolgate), public(k.Clients)
	out := map[string]string{}

	sa := jwt.NewAccountClaims(sys)
	sa.Name = SystemAccount

	ta := jwt.NewAccountClaims(tg)
	ta.Name = ToolgateAccount
	ta.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxBytesRequired: false}
	ta.Exports = jwt.Exports{
		{Name: "request API", Subject: jwt.Subject(wire.APISubject("*")), Type: jwt.Service, ResponseType: jwt.ResponseTypeSingleton},
		{Name: "announcements", Subject: jwt.Subject(wire.EntrySubjectPrefix + ">"), Type: jwt.Stream},
		{Name: "control", Subject: jwt.Subject(wire.CancelSubject), Type: jwt.Stream},
		{Name: "events", Subject: events, Type: jwt.Stream},
	}

	ca := jwt.NewAccountClaims(cl)
	ca.Name = ClientsAccount
	for _, e := range ta.Exports {
		imp := &jwt.Import{Name: e.Name, Subject: e.Subject, Account: tg, Type: e.Type}
		// The request API learns who asks from the server, never from the
		// asker: the import shares the requester's identity.
		imp.Share = e.Type == jwt.Service && e.Subject == jwt.Subject(wire.APISubject("*"))
		ca.Imports.Add(imp)
	}
	for _, r := range wire.Roles {
		scope := jwt.NewUserScope()
		scope.Key = public(k.Roles[r])
		scope.Role = string(r)
		scope.Template.Permissions = Permissions(r)
		scope.Description = "toolgate " + string(r)
		ca.SigningKeys.AddScopedSigner(scope)
	}
	for _, key := range revoked {
		ca.RevokeAt(key, time.Now())
	}

	op := pair(k.Operator)
	for _, ac := range []*jwt.AccountClaims{sa, ta, ca} {
		var vr jwt.ValidationResults
		ac.Validate(&vr)
		if errs := vr.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("account %s: %v", ac.Name, errs)
		}
		token, err := ac.Encode(op)
		if err != nil {
			return nil, fmt.Errorf("account %s: %w", ac.Name, err)
		}
		out[ac.Subject] = token
	}
	return out, nil
}

// operator returns the operator's claims, naming the system account.
func (k *Keys) operator() (*jwt.OperatorClaims, string, error) {
	oc := jwt.NewOperatorClaims(public(k.Operator))
	oc.Name = "toolgate"
	oc.SystemAccount = public(k.System)
	token, err := oc.Encode(pair(k.Operator))
	return oc, token, err
}

// NATSConfig is the part of a nats-server configuration that makes a
// server trust toolgate's operator and know its accounts, for servers
// toolgate does not start itself (a cluster): include it in each
// server's configuration. revoked is as for accounts.
func (k *Keys) NATSConfig(revoked []string) (string, error) {
	_, op, err := k.operator()
	if err != nil {
		return "", err
	}
	accs, err := k.accounts(revoked)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# toolgate's trust chain: generated by `toolgate creds nats-config`.\n")
	fmt.Fprintf(&b, "operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n", op, public(k.System))
	keys := make([]string, 0, len(accs))
	for pub := range accs {
		keys = append(keys, pub)
	}
	sort.Strings(keys)
	for _, pub := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", pub, accs[pub])
	}
	b.WriteString("}\n")
	return b.String(), nil
}

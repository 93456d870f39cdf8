package auth

import (
	"fmt"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Configure makes opts an embedded server that trusts only k's operator
// and knows its accounts: no client connects without a credential it
// issued, and a revoked one is refused.
func (k *Keys) Configure(opts *natsserver.Options, revoked []string) error {
	oc, _, err := k.operator()
	if err != nil {
		return err
	}
	accs, err := k.accounts(revoked)
	if err != nil {
		return err
	}
	resolver := &natsserver.MemAccResolver{}
	for pub, token := range accs {
		if err := resolver.Store(pub, token); err != nil {
			return err
		}
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = oc.SystemAccount
	opts.AccountResolver = resolver
	return nil
}

// Revoke makes a running server that k configured refuse the CLIENTS
// users in revoked, disconnecting those connected.
func (k *Keys) Revoke(s *natsserver.Server, revoked []string) error {
	accs, err := k.accounts(revoked)
	if err != nil {
		return err
	}
	pub := public(k.Clients)
	ac, err := jwt.DecodeAccountClaims(accs[pub])
	if err != nil {
		return err
	}
	if err := s.AccountResolver().Store(pub, accs[pub]); err != nil {
		return err
	}
	acc, err := s.LookupAccount(pub)
	if err != nil {
		return fmt.Errorf("account %s: %w", ClientsAccount, err)
	}
	s.UpdateAccountClaims(acc, ac)
	return nil
}

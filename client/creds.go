package client

import (
	"fmt"
	"os"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/wire"
)

// Credentials returns the options that connect with a toolgate
// credential, a NATS .creds file: the credential itself, and the inbox
// prefix of its identity (_INBOX_<name>), the only inbox on which such a
// credential may hear replies, so that no identity reads another's.
func Credentials(path string) ([]nats.Option, error) {
	name, err := credentialName(path)
	if err != nil {
		return nil, err
	}
	return []nats.Option{nats.UserCredentials(path), nats.CustomInboxPrefix(wire.InboxPrefix(name))}, nil
}

// credentialName is the name of the identity a .creds file holds.
func credentialName(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return "", fmt.Errorf("credentials %s: %w", path, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return "", fmt.Errorf("credentials %s: not a user JWT: %w", path, err)
	}
	if uc.Name == "" {
		return "", fmt.Errorf("credentials %s: the user JWT names no identity", path)
	}
	return uc.Name, nil
}

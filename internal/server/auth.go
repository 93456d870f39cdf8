package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/wire"
)

// CredsPath is where serve keeps, under its data directory, the
// credential it issued at first start for name: toolgate's own, and one
// per role, named after the role (admin.creds, agent.creds, …).
func CredsPath(data, name string) string {
	return filepath.Join(data, "creds", name+".creds")
}

// URLPath is where serve records, in its data directory, the URL its
// embedded NATS server listens on, so that the CLI given --data finds it
// on any port.
func URLPath(data string) string { return filepath.Join(data, "nats.url") }

// LocalURL is the URL serve recorded in data, or "" when it recorded
// none.
func LocalURL(data string) (string, error) {
	b, err := os.ReadFile(URLPath(data))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

// authDir is where the trust chain's keys live, under the data directory.
func authDir(data string) string { return filepath.Join(data, "auth") }

// localTrust loads the trust chain's keys from the data directory,
// creating them on first start along with the credentials of toolgate's
// own identity and of one identity per role, each a file only its owner
// may read.
func localTrust(data string) (*auth.Keys, error) {
	keys, err := auth.LoadOrCreate(authDir(data))
	if err != nil {
		return nil, fmt.Errorf("--data %s: trust chain: %w", data, err)
	}
	if err := os.MkdirAll(filepath.Dir(CredsPath(data, "x")), 0o700); err != nil {
		return nil, err
	}
	issue := map[string]func() (auth.Credential, error){auth.ServerUser: keys.ServerCreds}
	for _, r := range wire.Roles {
		issue[string(r)] = func() (auth.Credential, error) { return keys.Issue(string(r), r) }
	}
	for name, f := range issue {
		path := CredsPath(data, name)
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			continue // there already, or unreadable: connecting will say
		}
		c, err := f()
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w", name, err)
		}
		if err := os.WriteFile(path, c.Creds, 0o600); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// registerLocalCreds records the role credentials of the data directory
// among the identities, so that `creds list` shows them and `creds revoke`
// can revoke them. One recorded already is left as it is.
func registerLocalCreds(ctx context.Context, data string, ids *stores.IdentityStore) error {
	for _, r := range wire.Roles {
		raw, err := os.ReadFile(CredsPath(data, string(r)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted by its owner: nothing to record
		}
		if err != nil {
			return err
		}
		token, err := jwt.ParseDecoratedJWT(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", CredsPath(data, string(r)), err)
		}
		uc, err := jwt.DecodeUserClaims(token)
		if err != nil {
			return fmt.Errorf("%s: %w", CredsPath(data, string(r)), err)
		}
		id := wire.Identity{Name: uc.Name, Role: r, Key: uc.Subject, IssuedAt: uc.IssuedAt * 1000, IssuedBy: auth.ServerUser}
		if err := ids.Add(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// enforceRevocations keeps the embedded server refusing every revoked
// credential: at start, and whenever one is revoked, from any process.
// It closes applied once the revocations there at start are in force.
func (m *Main) enforceRevocations(ctx context.Context, keys *auth.Keys, js jetstream.JetStream, kv jetstream.KeyValue, applied chan<- struct{}) error {
	ids := stores.NewIdentityStore(js, kv)
	var inForce []string // the server starts refusing none
	once := sync.OnceFunc(func() { close(applied) })
	return consumer.RunRestarting(ctx, m.Log, "revocations", func(ctx context.Context) error {
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop() }()
		for {
			// Apply what is there now, then again after each change that
			// changes the revoked keys, and only then: updating the
			// account's claims re-registers its imports, and a request
			// sent meanwhile finds no responder.
			revoked, err := ids.RevokedKeys(ctx)
			if err != nil {
				return err
			}
			slices.Sort(revoked)
			if !slices.Equal(revoked, inForce) {
				if err := keys.Revoke(m.server, revoked); err != nil {
					return err
				}
				inForce = revoked
			}
			once()
			select {
			case <-ctx.Done():
				return nil
			case _, ok := <-w.Updates():
				if !ok {
					return fmt.Errorf("revocations: watch ended")
				}
			}
		}
	})
}

// InitTrust creates data's trust chain and role credentials, as serve's
// first start does, for servers toolgate does not start itself.
func InitTrust(data string) error {
	_, err := localTrust(data)
	return err
}

// SystemCreds is a credential of the NATS system account signed with
// data's keys: it reads the servers' statistics.
func SystemCreds(data string) ([]byte, error) {
	keys, err := auth.Load(authDir(data))
	if err != nil {
		return nil, fmt.Errorf("--data %s: %w", data, err)
	}
	return keys.SystemCreds()
}

// NATSConfig is the configuration that makes nats-servers trust data's
// credentials and refuse the revoked keys (see auth.Keys.NATSConfig).
func NATSConfig(data string, revoked []string) (string, error) {
	keys, err := auth.Load(authDir(data))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("--data %s: no trust chain there (toolgate creds init makes one): %w", data, err)
	} else if err != nil {
		return "", err
	}
	return keys.NATSConfig(revoked)
}

// TrustDir is where the trust chain's keys, and the receipt key, are
// kept under the data directory: what a backup takes of it.
func TrustDir(data string) string { return authDir(data) }

// OpenStore starts the embedded NATS server over data's store, as serve
// would but on a free loopback port, and connects to it with toolgate's
// own credential, for work on the store while no serve runs on it
// (toolgate restore). close shuts both down.
func OpenStore(data string) (nc *nats.Conn, close func(), err error) {
	keys, err := localTrust(data)
	if err != nil {
		return nil, nil, err
	}
	srv, err := embedded.StartServer(embedded.ServerConfig{
		Host: "127.0.0.1", Port: -1, StoreDir: filepath.Join(data, "jetstream"),
		Configure: func(o *natsserver.Options) error { return keys.Configure(o, nil) },
	})
	if err != nil {
		return nil, nil, err
	}
	nc, err = bus.Connect(bus.ConnConfig{URLs: srv.ClientURL(), CredsFile: CredsPath(data, auth.ServerUser), Name: "toolgate restore"}, nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); srv.Shutdown(); srv.WaitForShutdown() }, nil
}

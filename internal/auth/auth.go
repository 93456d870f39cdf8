// Package auth is toolgate's NATS trust chain: who may connect, as whom,
// and what each identity may publish and hear. It uses NATS's decentralized
// authentication (an operator, accounts and user JWTs), so that a
// credential names its holder and role in claims the server checks and
// passes on to toolgate with every request; docs/security.md says why and
// what each role may do.
//
// Three accounts, all signed by one operator:
//   - SYS, the NATS system account;
//   - TOOLGATE, toolgate's own: JetStream, its buckets and streams, its
//     request API and its events. Only toolgate's server identity lives
//     there;
//   - CLIENTS, every other identity (agents, executors, approvers, viewers,
//     admins). It has no JetStream. It imports toolgate's request API
//     sharing the requester's identity, the announcements and events, and
//     the control subject; each role's users are signed by a scoped
//     signing key whose template lists what the role may publish and
//     subscribe to.
package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/wire"
)

// The accounts' names, as the JWTs carry them.
const (
	SystemAccount   = "SYS"
	ToolgateAccount = "TOOLGATE"
	ClientsAccount  = "CLIENTS"
)

// ServerUser is the name of toolgate's own identity.
const ServerUser = "toolgate"

// Keys are the seeds of the trust chain: whoever holds them can issue any
// identity, so they live in one file readable by its owner only.
type Keys struct {
	Operator string               `json:"operator"`
	System   string               `json:"system"`
	Toolgate string               `json:"toolgate"`
	Clients  string               `json:"clients"`
	Roles    map[wire.Role]string `json:"roles"` // the CLIENTS account's scoped signing key of each role
}

// keysFile is where LoadOrCreate keeps the keys, under its directory.
const keysFile = "keys.json"

// LoadOrCreate reads dir's keys, creating them (and dir) on first use.
func LoadOrCreate(dir string) (*Keys, error) {
	k, err := Load(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if k, err = newKeys(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	data, _ := json.MarshalIndent(k, "", "  ")
	if err := writeNew(filepath.Join(dir, keysFile), data); err != nil {
		return nil, err
	}
	return k, nil
}

// Load reads dir's keys: an error matching fs.ErrNotExist when there are
// none.
func Load(dir string) (*Keys, error) {
	path := filepath.Join(dir, keysFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k Keys
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range wire.Roles {
		if k.Roles[r] == "" {
			return nil, fmt.Errorf("%s: no signing key for the role %s", path, r)
		}
	}
	return &k, nil
}

// writeNew writes a file only its owner may read, atomically: a reader
// sees all of it or none.
func writeNew(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func newKeys() (*Keys, error) {
	seed := func(create func() (nkeys.KeyPair, error)) (string, error) {
		kp, err := create()
		if err != nil {
			return "", err
		}
		s, err := kp.Seed()
		return string(s), err
	}
	k := &Keys{Roles: map[wire.Role]string{}}
	var err error
	if k.Operator, err = seed(nkeys.CreateOperator); err != nil {
		return nil, err
	}
	for _, p := range []*string{&k.System, &k.Toolgate, &k.Clients} {
		if *p, err = seed(nkeys.CreateAccount); err != nil {
			return nil, err
		}
	}
	for _, r := range wire.Roles {
		if k.Roles[r], err = seed(nkeys.CreateAccount); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func pair(seed string) nkeys.KeyPair {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		panic(fmt.Sprintf("auth: a stored seed does not parse: %v", err)) // LoadOrCreate checked them
	}
	return kp
}

func public(seed string) string {
	pub, _ := pair(seed).PublicKey()
	return pub
}

// UserName is what an identity's name may be: one token of a NATS
// subject, since its inbox and its calls' announcements are named after it.
var UserName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidUser checks a name and role for a new identity.
func ValidUser(name string, role wire.Role) error {
	if !UserName.MatchString(name) {
		return fmt.Errorf("user %q: 1 to 64 letters, digits, '-' or '_'", name)
	}
	if !slices.Contains(wire.Roles, role) {
		return fmt.Errorf("role %q: want agent, executor, approver, viewer or admin", role)
	}
	if name == ServerUser {
		return fmt.Errorf("user %q: the name of toolgate's own identity", name)
	}
	return nil
}

// Credential is an issued identity: its creds file and public key.
type Credential struct {
	Name  string
	Role  wire.Role
	Key   string // the user's public nkey, by which it is revoked
	Creds []byte // a NATS .creds file: the user JWT and its seed
}

// Issue makes a credential for name in role, signed by the role's key.
func (k *Keys) Issue(name string, role wire.Role) (Credential, error) {
	if err := ValidUser(name, role); err != nil {
		return Credential{}, err
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, err
	}
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount = public(k.Clients)
	uc.Tags.Add(wire.RoleTagPrefix + string(role))
	uc.IssuedAt = time.Now().Unix()
	// Scoped: the permissions are the role's template, not the JWT's.
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	token, err := uc.Encode(pair(k.Roles[role]))
	if err != nil {
		return Credential{}, err
	}
	return credential(name, role, pub, token, user)
}

// ServerCreds is toolgate's own credential, in its own account.
func (k *Keys) ServerCreds() (Credential, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, err
	}
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = ServerUser
	token, err := uc.Encode(pair(k.Toolgate))
	if err != nil {
		return Credential{}, err
	}
	return credential(ServerUser, wire.RoleAdmin, pub, token, user)
}

// SystemCreds is a credential in the NATS system account, for reading
// the servers' statistics ($SYS.REQ.SERVER.PING.VARZ), as toolgate bench
// does against a toolgate serving elsewhere on the machine.
func (k *Keys) SystemCreds() ([]byte, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "toolgate-system"
	uc.Expires = time.Now().Add(24 * time.Hour).Unix()
	token, err := uc.Encode(pair(k.System))
	if err != nil {
		return nil, err
	}
	seed, _ := user.Seed()
	return jwt.FormatUserConfig(token, seed)
}

func credential(name string, role wire.Role, pub, token string, user nkeys.KeyPair) (Credential, error) {
	seed, _ := user.Seed()
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return Credential{}, err
	}
	return Credential{Name: name, Role: role, Key: pub, Creds: creds}, nil
}

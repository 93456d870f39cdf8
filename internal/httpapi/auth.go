package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Role is what a token may do.
type Role = wire.Role

// The roles a token can carry.
const (
	RoleAgent    = wire.RoleAgent
	RoleExecutor = wire.RoleExecutor
	RoleApprover = wire.RoleApprover
	RoleViewer   = wire.RoleViewer
	RoleAdmin    = wire.RoleAdmin
)

// User is who a request comes from: the application layer's actor.
type User = gate.Actor

// Tokens maps bearer tokens to users. The zero Tokens is open: every
// request is an admin named by its X-Toolgate-User header (or "anonymous"),
// for one machine on loopback only.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	sum  [32]byte // sha256 of the token: equal lengths for constant-time compares
	user User
}

// Open reports whether no tokens are configured.
func (t *Tokens) Open() bool { return t == nil || len(t.entries) == 0 }

// ParseTokens reads tokens, one per line: TOKEN USER ROLE[,ROLE…], and
// optionally GROUP[,GROUP…], the groups the user is in (a policy's
// group:NAME entries admit them). Blank lines and lines starting with #
// are skipped; ";" also ends an entry, so a list fits in one environment
// variable.
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{}
	var entries []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue // a comment, ";" and all
		}
		entries = append(entries, strings.Split(line, ";")...)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	n := 0
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		n++
		f := strings.Fields(entry)
		if len(f) != 3 && len(f) != 4 {
			return nil, fmt.Errorf("tokens: entry %d: want TOKEN USER ROLE[,ROLE…] [GROUP[,GROUP…]], got %d fields", n, len(f))
		}
		if len(f[0]) < 16 {
			return nil, fmt.Errorf("tokens: entry %d (user %s): token must be at least 16 characters", n, f[1])
		}
		if _, isGroup := machine.GroupOf(f[1]); isGroup {
			return nil, fmt.Errorf("tokens: entry %d: user %s: a user's name does not start with %s, which names a group in the policy", n, f[1], machine.GroupPrefix)
		}
		u := User{Name: f[1]}
		if len(f) == 4 {
			u.Groups = strings.Split(f[3], ",")
			if len(u.Groups) > maxClaimValues || slices.ContainsFunc(u.Groups, func(g string) bool { return g == "" || len(g) > maxClaimString }) {
				return nil, fmt.Errorf("tokens: entry %d (user %s): want at most %d groups of 1 to %d bytes, separated by commas", n, f[1], maxClaimValues, maxClaimString)
			}
		}
		for _, r := range strings.Split(f[2], ",") {
			if !slices.Contains(wire.Roles, Role(r)) {
				return nil, fmt.Errorf("tokens: entry %d (user %s): unknown role %q: want agent, executor, approver, viewer or admin", n, f[1], r)
			}
			u.Roles = append(u.Roles, Role(r))
		}
		t.entries = append(t.entries, tokenEntry{sum: sha256.Sum256([]byte(f[0])), user: u})
	}
	return t, nil
}

// openUser is the user of a request to an open API: an admin named by
// its X-Toolgate-User header.
func openUser(r *http.Request) User {
	id := r.Header.Get("X-Toolgate-User")
	if id == "" {
		id = "anonymous"
	}
	return User{Name: id, Roles: []Role{RoleAdmin}}
}

// lookup returns the user of token, or false when it is none of the
// file's. Every configured token is compared, in constant time, so
// timing tells nothing about which one nearly matched.
func (t *Tokens) lookup(token string) (User, bool) {
	if t == nil {
		return User{}, false
	}
	sum := sha256.Sum256([]byte(token))
	var found User
	match := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			found, match = e.user, 1
		}
	}
	return found, match == 1
}

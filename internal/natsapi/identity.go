package natsapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// requestInfoHeader is where a NATS server says who sent a request that
// crossed into toolgate's account through a service import that shares
// it. The server sets it itself, replacing any header of that name the
// sender put there, so it is the sender's authenticated identity.
const requestInfoHeader = "Nats-Request-Info"

// requestInfo is what toolgate reads of the server's ClientInfo.
type requestInfo struct {
	Account string   `json:"acc"`
	User    string   `json:"user"`     // the credential's public key
	Name    string   `json:"name_tag"` // its user JWT's name
	Tags    []string `json:"tags"`     // its user JWT's tags: role:<role>
}

// actorOf is who sent a request. Without requester info the request came
// from inside toolgate's own account, where only toolgate's server
// identity lives (see docs/security.md): toolgate itself. With it, the
// actor is the credential's name and the roles its tags give.
func actorOf(h micro.Headers) (gate.Actor, error) {
	raw := h.Get(requestInfoHeader)
	if raw == "" {
		return gate.System, nil
	}
	if a, ok := actors.Load(raw); ok {
		return a.(gate.Actor), nil
	}
	a, err := parseActor(raw)
	if err == nil {
		if actorsSize.Add(1) > maxCachedActors {
			actors.Clear() // a bound, not an eviction policy: the set is small
			actorsSize.Store(0)
		}
		actors.Store(raw, a)
	}
	return a, err
}

// actors caches the actor of each requester info header seen: a
// connection sends the same one request after request (the server sets
// it; only the round-trip time in it changes, now and then), and decoding
// it was a tenth of a request's cost.
var (
	actors     sync.Map // header value → gate.Actor
	actorsSize atomic.Int64
)

const maxCachedActors = 4096

func parseActor(raw string) (gate.Actor, error) {
	var info requestInfo
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return gate.Actor{}, fmt.Errorf("%w: unreadable requester info: %v", machine.ErrForbidden, err)
	}
	a := gate.Actor{Name: info.Name, Key: info.User}
	for _, t := range info.Tags {
		if r, ok := strings.CutPrefix(t, wire.RoleTagPrefix); ok {
			a.Roles = append(a.Roles, wire.Role(r))
		}
	}
	if a.Name == "" || len(a.Roles) == 0 {
		return gate.Actor{}, fmt.Errorf("%w: credential %s of account %s names no toolgate identity and role", machine.ErrForbidden, info.User, info.Account)
	}
	return a, nil
}

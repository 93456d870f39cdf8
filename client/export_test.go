package client

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// AwaitSubmittedAt is AwaitWith for a call this process submitted at
// submitted, as Client.Await has it after its own Submit.
func AwaitSubmittedAt(ctx context.Context, nc *nats.Conn, read ReadFunc, pendingID string, submitted time.Time) (Outcome, error) {
	return await(ctx, nc, read, pendingID, awaitConfig{submitted: submitted})
}

// CredentialName is credentialName.
var CredentialName = credentialName

// Is reports whether a lease holder or actor is x.
func (x *Executor) Is(name string) bool { return x.is(name) }

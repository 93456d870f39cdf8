package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/claudecode"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/gate"
	"github.com/toolgate/toolgate/machine"
)

// hookGate is what Claude Code's HTTP hooks need of toolgate, answered by
// the application layer in this process: no request to itself over NATS.
type hookGate struct {
	g  *gate.Service
	nc *nats.Conn // hears the announcements Await waits for
}

var _ claudecode.Gate = hookGate{}

func (h hookGate) Submit(ctx context.Context, call machine.Call) (*machine.Entry, error) {
	return h.g.Submit(ctx, call)
}

func (h hookGate) Await(ctx context.Context, pendingID string, opts ...client.AwaitOption) (client.Outcome, error) {
	return client.AwaitWith(ctx, h.nc, h.g.Read, pendingID, opts...)
}

func (h hookGate) Get(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return h.g.Get(ctx, pendingID)
}

func (h hookGate) Cancel(ctx context.Context, pendingID, by, reason string) (*machine.Entry, error) {
	return h.g.Cancel(ctx, pendingID, by, reason)
}

// Started claims the call for Claude Code, which runs it itself; an hour,
// as the request API's started gives an agent.
func (h hookGate) Started(ctx context.Context, pendingID, by string) (*machine.Entry, error) {
	return h.g.Claim(ctx, pendingID, by, time.Hour)
}

func (h hookGate) Succeed(ctx context.Context, pendingID, by string, result json.RawMessage, cost float64) (*machine.Entry, error) {
	return h.g.Complete(ctx, pendingID, machine.Outcome{Holder: by, Result: result, Cost: cost})
}

func (h hookGate) Fail(ctx context.Context, pendingID, by, errMsg string, cost float64) (*machine.Entry, error) {
	return h.g.Fail(ctx, pendingID, machine.Outcome{Holder: by, Error: errMsg, Cost: cost})
}

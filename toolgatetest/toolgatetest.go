// Package toolgatetest starts toolgate's server side for tests: the
// application layer over a real embedded NATS deployment (bus/bustest),
// with its request API served and the relay running, so that agents and
// executors built on package client talk to it as they would in
// production.
package toolgatetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/natsapi"
	"github.com/toolgate/toolgate/wire"
)

// Options choose what the started gate evaluates calls with.
type Options struct {
	// Policy decides what a call needs (default: ask about every one).
	Policy machine.Evaluator
	// Clock replaces time.Now in the application layer.
	Clock func() time.Time
}

// Start serves toolgate's request API over env and runs its relay until
// the test ends, and returns the application layer, for a test to act as
// toolgate itself would (a timer expiring a call, say).
func Start(t testing.TB, env *bustest.Env, opts Options) *gate.Service {
	t.Helper()
	g := gate.New(gate.Config{NC: env.NC, Buckets: env.Buckets, Policy: opts.Policy, Clock: opts.Clock, Log: bustest.Logger()})
	bustest.RunRelay(t, env.JS)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- natsapi.New(g, bustest.Logger()).Run(ctx, env.NC, "0.0.1-test") }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("request API: %v", err)
		}
	})
	require.Eventually(t, func() bool {
		_, err := env.NC.Request("$SRV.PING."+wire.ServiceName, nil, time.Second)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "toolgate's request API never answered a ping")
	return g
}

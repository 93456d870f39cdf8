package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/internal/netfault"
)

// TestRunner_AStalledConsumerIsNoticedAndRecovers runs a consumer over a
// link whose replies are lost while messages wait: nothing is delivered
// and its state cannot be read, so past the stall bound the process
// reports it stalled (Stalled, a warning) and binds again; once the link
// heals every message is handled, the stall reads 0 and the recovery is
// logged.
func TestRunner_AStalledConsumerIsNoticedAndRecovers(t *testing.T) {
	defer consumer.SetStallBound(2 * time.Second)()
	env := startEnv(t)
	link, err := netfault.Listen("runner", strings.TrimPrefix(env.URLs, "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = link.Close() })
	nc, err := nats.Connect("nats://"+link.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	var logs bustest.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var handled atomic.Int32
	cfg := testConfig("stall")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	r := consumer.NewRunner(js, cfg, log, func(context.Context, consumer.Msg) error { handled.Add(1); return nil })
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	publish(t, env, jobSubject("stall"), "first")
	bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the first job handled", func() (bool, any) { return handled.Load() == 1, handled.Load() })

	link.Drop(netfault.FromTarget)
	for i := range 5 {
		publish(t, env, jobSubject("stall"), string(rune('a'+i)))
	}
	bustest.Eventually(t, 15*time.Second, 50*time.Millisecond, "the stall noticed and acted on", func() (bool, any) {
		return consumer.Stalled()[cfg.Durable] >= 2*time.Second && strings.Contains(logs.String(), "consumer stalled"), logs.String()
	})
	assert.EqualValues(t, 1, handled.Load(), "nothing delivered while the replies are lost")

	link.Heal()
	bustest.Eventually(t, 30*time.Second, 50*time.Millisecond, "every job handled and the stall over", func() (bool, any) {
		return handled.Load() >= 6 && consumer.Stalled()[cfg.Durable] == 0 && strings.Contains(logs.String(), "consumer flows again"),
			[]any{handled.Load(), consumer.Stalled()[cfg.Durable], logs.String()}
	})
}

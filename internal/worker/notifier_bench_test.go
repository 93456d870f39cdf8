package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	tgpolicy "github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkFanOut measures the notifier's fan-out catching up: b.N
// approval_required events published while no notifier runs (an outage),
// then a notifier started, until it has queued every event's delivery to
// the policy's one webhook (its consumer's ack floor at the stream's last
// event). The webhook answers at once; its deliveries run beside, as they
// would. It reports events fanned out a second, over the raw KV
// compare-and-set rate measured on the same server before (ratio), and
// the server's messages an event (fan-out and deliveries).
//
// Run it with: go test -run '^$' -bench FanOut -benchtime 5000x ./worker
func BenchmarkFanOut(b *testing.B) {
	env := bustest.Start(b, bustest.Topology{Name: "single", Replicas: 1})
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.Cleanup(hook.Close)
	d, err := tgpolicy.Parse(fmt.Appendf(nil, "default:\n  notify:\n    - {type: webhook, url: %q, secret: s3cr3t}\n", hook.URL))
	require.NoError(b, err)
	engine, err := tgpolicy.NewEngine(d, nil, nil)
	require.NoError(b, err)
	ctx := context.Background()
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- worker.NewNotifier(env.Conn, engine, nil, bustest.Logger()).Run(ctx) }()
		return func() {
			cancel()
			require.NoError(b, <-done)
		}
	}

	// A first notifier makes the consumer, at the stream's end.
	stop := run()
	bustest.Eventually(b, time.Minute, 10*time.Millisecond, "the notifier's consumer appeared", func() (bool, any) {
		_, err := env.JS.Consumer(ctx, wire.EventsStream, worker.NotifierDurable)
		return err == nil, err
	})
	stop()

	for i := range b.N {
		id := machine.PendingID(fmt.Sprintf("conv-%03d", i%64), fmt.Sprintf("call-%07d", i))
		data, err := json.Marshal(wire.Event{V: wire.EventVersion, ID: wire.MsgID(id, uint64(i+1)), Type: wire.SubjectApprovalRequired,
			Event: machine.EventAsk, To: machine.StatePendingApproval, At: time.Now().UnixMilli(),
			Entry: &machine.Entry{PendingID: id, ToolName: "send_email", Team: "support", ConversationID: fmt.Sprintf("conv-%03d", i%64),
				Status: machine.StatePendingApproval, ToolArguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed"}`)}})
		require.NoError(b, err)
		_, err = env.JS.PublishAsync(wire.SubjectApprovalRequired, data)
		require.NoError(b, err)
	}
	select {
	case <-env.JS.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("events not stored within a minute")
	}
	events, err := env.JS.Stream(ctx, wire.EventsStream)
	require.NoError(b, err)
	info, err := events.Info(ctx)
	require.NoError(b, err)
	last := info.State.LastSeq
	cas := casRate(b, env)

	before, err := env.Servers[0].Varz(nil)
	require.NoError(b, err)
	b.ResetTimer()
	start := time.Now()
	defer run()()
	var floor uint64
	bustest.Eventually(b, 10*time.Minute, 10*time.Millisecond, fmt.Sprintf("the fan-out reached event %d", last), func() (bool, any) {
		c, err := env.JS.Consumer(ctx, wire.EventsStream, worker.NotifierDurable)
		if err != nil {
			return false, fmt.Sprintf("acknowledged to %d", floor)
		}
		i, err := c.Info(ctx)
		if err != nil {
			return false, fmt.Sprintf("acknowledged to %d", floor)
		}
		floor = i.AckFloor.Stream
		return floor >= last, fmt.Sprintf("acknowledged to %d", floor)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	after, err := env.Servers[0].Varz(nil)
	require.NoError(b, err)
	perSec := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(perSec, "events/s")
	b.ReportMetric(cas, "cas/s")
	b.ReportMetric(perSec/cas, "ratio")
	b.ReportMetric(float64(after.InMsgs+after.OutMsgs-before.InMsgs-before.OutMsgs)/float64(b.N), "msgs/event")
}

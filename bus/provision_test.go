package bus_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestProvision_HandlesOpenedWhileProcessesStartAllRead: every toolgate
// process provisions at start. A client binding the entries' bucket while
// that happens must get a handle that reads: a provisioning that turned
// direct gets on and off again left handles whose every read answered "no
// responders", and an executor holding one never claimed its calls.
func TestProvision_HandlesOpenedWhileProcessesStartAllRead(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	_, err := env.KV.Put(ctx, "c.t", []byte(`{}`))
	require.NoError(t, err)

	starting, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 { // three processes starting, again and again
		wg.Go(func() {
			for starting.Err() == nil {
				_, _ = bus.Provision(starting, env.JS, bus.Topology{Replicas: 1})
			}
		})
	}
	var opened, broken atomic.Int64
	var firstErr atomic.Value
	var g errgroup.Group
	// 800 handles: of 2,000 opened so, 72 were broken before the fix
	// (8f04c78).
	for range 8 {
		g.Go(func() error {
			for range 100 {
				kv, err := env.JS.KeyValue(ctx, wire.CallsBucket)
				if err != nil {
					return err
				}
				opened.Add(1)
				if _, err := kv.Get(ctx, "c.t"); err != nil {
					broken.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	cancel()
	wg.Wait()
	assert.Zero(t, broken.Load(), "of %d handles opened during provisioning, %d failed to read (first: %v)", opened.Load(), broken.Load(), firstErr.Load())
}

// TestProvision_ManyProcessesOnAFreshCluster: processes started together
// (a Kubernetes rollout) all provision a fresh 3-node cluster. A cluster
// creating a stream leaves other requests to create it unanswered until
// their caller gives up; each such request is asked again, and answered
// once the stream exists.
func TestProvision_ManyProcessesOnAFreshCluster(t *testing.T) {
	t.Parallel()
	urls := bustest.ClientURLs(bustest.Cluster(t, 3))
	errs := make(chan error, 5)
	for range cap(errs) {
		_, js := bustest.Connect(t, urls)
		go func() {
			// A bound for a loaded machine, not an expectation: each of the
			// buckets and streams is one more round of a cluster that
			// answers only one creator at a time (3.7 s on a quiet one).
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			_, err := bus.Provision(ctx, js, bus.Topology{Replicas: 3})
			errs <- err
		}()
	}
	for range cap(errs) {
		require.NoError(t, <-errs)
	}
}

// TestProvision_DeletesTheRetiredWorkStream: the stream an older toolgate
// queued runnable calls on is gone once a toolgate that does not read it
// starts; nothing else it finds changes.
func TestProvision_DeletesTheRetiredWorkStream(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	_, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "TOOL_WORK", Subjects: []string{"toolgate.work.>"}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	_, err = env.JS.Publish(ctx, "toolgate.work.deploy", []byte(`{}`))
	require.NoError(t, err)
	_, err = env.Store.Create(ctx, &machine.Entry{PendingID: "kept.c1", Status: machine.StatePendingApproval, ToolName: "deploy"})
	require.NoError(t, err)

	_, err = bus.Provision(ctx, env.JS, bus.Topology{Replicas: 1})
	require.NoError(t, err)
	_, err = env.JS.Stream(ctx, "TOOL_WORK")
	assert.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	_, _, err = env.Store.Get(ctx, "kept.c1")
	assert.NoError(t, err, "the calls stay")
	_, err = bus.Provision(ctx, env.JS, bus.Topology{Replicas: 1})
	assert.NoError(t, err, "and again, with nothing to delete")
}

// TestStreams_NamesEveryStreamProvisioned: Streams is what a backup takes,
// so a bucket or stream provisioned and not named there would be lost by
// every backup.
func TestStreams_NamesEveryStreamProvisioned(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	_, js := bustest.Connect(t, srv.ClientURL())
	_, err := bus.Provision(t.Context(), js, bus.Topology{Replicas: 1})
	require.NoError(t, err)
	_, err = bus.ProvisionAnalytics(t.Context(), js, 1)
	require.NoError(t, err)
	var provisioned []string
	names := js.StreamNames(t.Context())
	for name := range names.Name() {
		provisioned = append(provisioned, name)
	}
	require.NoError(t, names.Err())
	assert.ElementsMatch(t, provisioned, bus.Streams())
}

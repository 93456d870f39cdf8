package client_test

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// awaitStates waits until the calls of conversation conv are in the
// states want counts, and fails with the states it saw last. It watches
// the calls' bucket, which pushes each write, rather than listing the
// calls again and again: a list of a thousand calls is work of its own,
// which a loaded machine then does over and over beside the load and may
// not answer in time.
func awaitStates(t *testing.T, js jetstream.JetStream, conv string, want map[machine.State]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	w, err := kv.Watch(ctx, machine.ConversationKey(conv)+".>", jetstream.IgnoreDeletes())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	status := map[string]machine.State{}
	got := map[machine.State]int{}
	for {
		select {
		case u, ok := <-w.Updates():
			if !ok {
				t.Fatalf("conversation %s: the watch ended; last saw %v", conv, got)
			}
			if u == nil {
				continue // the values stored before the watch are in
			}
			var e machine.Entry
			require.NoError(t, json.Unmarshal(u.Value(), &e), u.Key())
			if old, ok := status[u.Key()]; ok {
				if got[old]--; got[old] == 0 {
					delete(got, old)
				}
			}
			status[u.Key()] = e.Status
			got[e.Status]++
			if maps.Equal(got, want) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("conversation %s: calls in states %v, not within 2m; last saw %v", conv, want, got)
		}
	}
}

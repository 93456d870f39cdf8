package server

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// TestSync_TheEmbeddedServerSyncsAsToldAndOnlyIt: --sync always has the
// embedded server fsync each write before acknowledging it, the default
// syncs on its interval, and --sync always with servers toolgate does not
// start is refused, naming where that setting lives.
func TestSync_TheEmbeddedServerSyncsAsToldAndOnlyIt(t *testing.T) {
	t.Parallel()
	for _, sync := range []string{SyncAlways, SyncInterval} {
		t.Run(sync, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Data, cfg.Listen, cfg.HTTP, cfg.Sync = filepath.Join(t.TempDir(), "data"), "127.0.0.1:-1", "", sync
			cfg.Roles = Roles{"relay"}
			require.NoError(t, cfg.Validate())
			m := &Main{Config: cfg, Log: bustest.Logger()}
			done := make(chan error, 1)
			go func() { done <- m.Run(t.Context()) }()
			t.Cleanup(func() { <-done })
			select {
			case <-m.Ready():
			case err := <-done:
				t.Fatalf("serve exited: %v", err)
			}
			js := m.server.JetStreamConfig()
			require.NotNil(t, js)
			assert.Equal(t, sync == SyncAlways, js.SyncAlways, "JetStream's config: %+v", *js)
		})
	}

	cfg := DefaultConfig()
	cfg.Sync = "sometimes"
	assert.ErrorContains(t, cfg.Validate(), `--sync: interval or always, got "sometimes"`)
	cfg.Sync, cfg.Conn.URLs = SyncAlways, "nats://elsewhere:4222"
	assert.ErrorContains(t, cfg.Validate(), "sync_interval: always")
}

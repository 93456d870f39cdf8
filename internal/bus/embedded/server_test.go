package embedded

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartServer_BusyPortFailsAtOnce: a server that cannot listen says
// why at once, instead of being waited for until readyWait runs out.
func TestStartServer_BusyPortFailsAtOnce(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	start := time.Now()
	s, err := StartServer(ServerConfig{Host: "127.0.0.1", Port: port, StoreDir: t.TempDir()})
	if s != nil {
		s.Shutdown()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), busy.Addr().String()+": bind: address already in use")
	assert.Less(t, time.Since(start), readyWait/3)

	// A free port still starts.
	s, err = StartServer(ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	s.Shutdown()
}

package main

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBind_BusyPortsFailAtOnce: serve on an address another process
// holds fails at once, naming the address, whichever listener it is:
// the embedded NATS server's (--listen), the HTTP API's (--http), the
// metrics' (--metrics).
func TestBind_BusyPortsFailAtOnce(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() })
	addr := busy.Addr().String()
	for _, flag := range []string{"--listen", "--http", "--metrics"} {
		t.Run(flag, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			start := time.Now()
			// Any free port for the others; the last of a flag given twice wins.
			code := run(t.Context(), []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--http", "127.0.0.1:0", flag, addr}, &stderr, &stderr)
			took := time.Since(start)
			assert.Equal(t, exitRefused, code, stderr.String())
			assert.Contains(t, stderr.String(), addr+": bind: address already in use")
			// It used to be found out only when the server's readiness
			// wait, a minute, ran out.
			assert.Less(t, took, 20*time.Second, "it waited before saying so")
		})
	}
}

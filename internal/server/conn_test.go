package server

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// watch runs watchConn over a connection to urls until the test ends.
func watch(t *testing.T, urls string, limit time.Duration) (*nats.Conn, <-chan error) {
	t.Helper()
	nc, _ := bustest.Connect(t, urls)
	m := &Main{Config: Config{OutageLimit: limit}, Log: bustest.Logger()}
	done := make(chan error, 1)
	go func() { done <- m.watchConn(t.Context(), nc) }()
	return nc, done
}

func wait(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s: watchConn still running after %s", what, within)
		return nil
	}
}

// A connection NATS closes for good (here for a subject longer than its
// control line, which is how one over-long caller id once took serve off
// the bus) ends the process at once, saying why, rather than leaving it up
// and serving errors.
func TestWatchConn_AClosedConnectionEndsTheProcess(t *testing.T) {
	t.Parallel()
	nc, done := watch(t, bustest.Server(t).ClientURL(), time.Hour)
	require.NoError(t, nc.Publish("x."+strings.Repeat("a", 10_000), nil))
	err := wait(t, done, 10*time.Second, "after the server closed the connection")
	require.ErrorContains(t, err, "the NATS connection was closed")
	require.ErrorContains(t, err, "maximum control line exceeded")
}

// A connection that cannot come back within the outage limit ends the
// process.
func TestWatchConn_AnOutageLongerThanTheLimitEndsTheProcess(t *testing.T) {
	t.Parallel()
	proxy := bustest.StartProxy(t, bustest.Server(t).Addr().String())
	_, done := watch(t, proxy.URL, 500*time.Millisecond)
	proxy.Cut()
	err := wait(t, done, 10*time.Second, "with NATS cut off")
	require.ErrorContains(t, err, "no NATS connection for 500ms")
}

package stores_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
)

// TestServerClock_ProcessesWhoseClocksDisagreeTellTheSameTime: processes
// whose own clocks are 30 s fast and 30 s slow tell the server's time,
// within the round trips they measured it in, and a clock not synced yet
// is the process's own.
func TestServerClock_ProcessesWhoseClocksDisagreeTellTheSameTime(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second, 0} {
		local := func() time.Time { return time.Now().Add(skew) }
		c := stores.NewServerClock(env.KV, local)
		assert.WithinDuration(t, local(), c.Now(), time.Second, "not synced: the process's own clock")
		require.NoError(t, c.Sync(t.Context(), bustest.Logger()))
		off, within := c.Offset()
		// The server runs on this machine: its clock is time.Now.
		assert.InDelta(t, float64(-skew), float64(off), float64(within+50*time.Millisecond), "skew %s: offset %s within %s", skew, off, within)
		assert.WithinDuration(t, time.Now(), c.Now(), within+50*time.Millisecond, "skew %s", skew)
	}
}

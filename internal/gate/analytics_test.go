package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestAnalytics_ChecksTheWindowAndSaysWhenUnavailable: the use case
// refuses a window past its bounds (by resolution) before it asks for
// the report, hands the report the request it checked, and refuses
// analytics it cannot read as unavailable (503), not as a fault.
func TestAnalytics_ChecksTheWindowAndSaysWhenUnavailable(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	var asked []wire.AnalyticsRequest
	fail := false
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Analytics: func(_ context.Context, r wire.AnalyticsRequest) (json.RawMessage, error) {
		asked = append(asked, r)
		if fail {
			return nil, errors.New("the analytics bucket is away")
		}
		return json.RawMessage(`{}`), nil
	}})
	viewer := actor("vic", wire.RoleViewer)
	for _, c := range []struct {
		r    wire.AnalyticsRequest
		want string
	}{
		{wire.AnalyticsRequest{Hours: wire.MaxAnalyticsHours + 1}, "hours: must be 1 to 744, got 745"},
		{wire.AnalyticsRequest{Hours: 25, Resolution: wire.AnalyticsByMinute}, "hours: must be 1 to 24 at minute resolution, got 25"},
		{wire.AnalyticsRequest{Resolution: "day"}, `resolution: must be hour or minute, got "day"`},
		{wire.AnalyticsRequest{Until: -1}, "until: must be epoch milliseconds, got -1"},
		{wire.AnalyticsRequest{Hours: -1}, "hours: must be 1 to 744, got -1"},
	} {
		_, err := g.Analytics(t.Context(), viewer, c.r)
		require.ErrorIs(t, err, machine.ErrInvalid, "%+v", c.r)
		assert.ErrorContains(t, err, c.want)
	}
	assert.Empty(t, asked, "nothing refused reached the report")

	ok := wire.AnalyticsRequest{Hours: 24, Resolution: wire.AnalyticsByMinute, Until: 1_700_000_000_000}
	_, err := g.Analytics(t.Context(), viewer, ok)
	require.NoError(t, err)
	assert.Equal(t, []wire.AnalyticsRequest{ok}, asked)

	fail = true
	_, err = g.Analytics(t.Context(), viewer, wire.AnalyticsRequest{})
	require.ErrorIs(t, err, wire.ErrUnavailable)
	status, code := wire.ErrorStatus(err)
	assert.Equal(t, 503, status)
	assert.Equal(t, "unavailable", code)
	assert.Equal(t, "analytics unavailable: the analytics bucket is away", err.Error())
}

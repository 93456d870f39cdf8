package gate_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestEvents_RefusesWhatItCannotServe: a page of events is refused, naming
// what is wrong, for a wait or a page out of bounds, too many or too long
// event names, or a credential that reads no events.
func TestEvents_RefusesWhatItCannotServe(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	s := workService(t, env, machine.Verdict{Action: machine.ActionRun})
	viewer := actor("viewer", wire.RoleViewer)
	for _, tc := range []struct {
		r    wire.EventsRequest
		want string
	}{
		{wire.EventsRequest{WaitMs: 16_000}, "waitMs: 16000: want 0 to 15000"},
		{wire.EventsRequest{Limit: 1001}, "limit: 1001: want 0 to 1000"},
		{wire.EventsRequest{Types: make([]string, 65)}, "types: 65 names, at most 64"},
		{wire.EventsRequest{Types: []string{"approval_granted", strings.Repeat("x", 65)}}, "types[1]: at most 64 bytes, got 65"},
	} {
		_, err := s.Events(t.Context(), viewer, tc.r)
		assert.ErrorIs(t, err, machine.ErrInvalid)
		assert.ErrorContains(t, err, tc.want)
	}
	_, err := s.Events(t.Context(), executor, wire.EventsRequest{})
	assert.ErrorIs(t, err, machine.ErrForbidden, "an executor's credential reads no events")
}

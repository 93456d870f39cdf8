package client

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/machine"
)

// TestAnswer_EveryState walks every state: what Await makes of it, with
// and without UntilFinished. No state may be both refused and runnable.
func TestAnswer_EveryState(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	type want struct {
		done     bool
		kind     Kind
		rejected Rejection
		failed   bool
	}
	cases := []struct {
		state         machine.State
		approvalOnly  want
		untilFinished want
	}{
		{machine.StatePendingApproval, want{}, want{}},
		{machine.StateScheduled, want{done: true, kind: Scheduled}, want{}},
		{machine.StateApproved, want{done: true, kind: Approved}, want{}},
		{machine.StateExecuting, want{}, want{}},
		{machine.StateCompletedSuccess, want{done: true, kind: Executed}, want{done: true, kind: Executed}},
		{machine.StateCompletedFailure, want{done: true, kind: Failed, failed: true}, want{done: true, kind: Failed, failed: true}},
		{machine.StateRejectedByUser, want{done: true, rejected: RejectedByUser}, want{done: true, rejected: RejectedByUser}},
		{machine.StateRejectedByTimeout, want{done: true, rejected: RejectedByTimeout}, want{done: true, rejected: RejectedByTimeout}},
		{machine.StateRejectedByPolicy, want{done: true, rejected: DeniedByPolicy}, want{done: true, rejected: DeniedByPolicy}},
		{machine.StateCancelled, want{done: true, rejected: Cancelled}, want{done: true, rejected: Cancelled}},
	}
	seen := map[machine.State]bool{}
	for _, tc := range cases {
		seen[tc.state] = true
		for _, until := range []bool{false, true} {
			w := tc.approvalOnly
			if until {
				w = tc.untilFinished
			}
			e := &machine.Entry{PendingID: "c.t", ToolName: "Bash", Status: tc.state, ScheduledExecutionTime: now.UnixMilli()}
			got := answer(e, awaitConfig{untilFinished: until}, now)
			assert.Equal(t, w.done, got.done, "%s until=%v", tc.state, until)
			assert.Equal(t, w.kind, got.out.Kind, "%s until=%v", tc.state, until)
			var rej *RejectedError
			if w.rejected != "" {
				if assert.True(t, errors.As(got.err, &rej), "%s until=%v: %v", tc.state, until, got.err) {
					assert.Equal(t, w.rejected, rej.Kind)
				}
				assert.Equal(t, Outcome{}, got.out, "%s: a refusal carries the zero Outcome", tc.state)
			}
			var execErr *ExecutionError
			assert.Equal(t, w.failed, errors.As(got.err, &execErr), "%s until=%v", tc.state, until)
			if got.err == nil {
				assert.NotEqual(t, Failed, got.out.Kind)
			}
		}
	}
	for _, s := range machine.States {
		assert.True(t, seen[s], "state %s has no case", s)
	}
}

func TestAnswer_ScheduledInTheFutureWakesAtItsTime(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	e := &machine.Entry{Status: machine.StateScheduled, ScheduledExecutionTime: now.Add(time.Minute).UnixMilli()}
	got := answer(e, awaitConfig{}, now)
	assert.False(t, got.done)
	assert.Equal(t, now.Add(time.Minute), got.wake)
	assert.True(t, answer(e, awaitConfig{}, now.Add(time.Minute)).done)
}

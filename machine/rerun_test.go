package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
)

// TestRerun_OnceByAPersonOnlyWhenTheOutcomeIsUnknown: a call whose
// executor was lost is run again, as a new call recorded as the person's
// decision, once; a call that finished as it should is not, nor is one
// whose approvers the person is not among.
func TestRerun_OnceByAPersonOnlyWhenTheOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, Approvers: []string{"alice", "bob"}, ApprovalTimeout: time.Hour}))
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	lost := func(conv string) *machine.Entry {
		e, err := m.Submit(ctx, call(conv, "c1"))
		require.NoError(t, err)
		_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
		require.NoError(t, err)
		_, err = m.Claim(ctx, e.PendingID, "exec-1", time.Minute)
		require.NoError(t, err)
		e, err = later.AbandonLease(ctx, e.PendingID)
		require.NoError(t, err)
		require.True(t, e.OutcomeUnknown)
		return e
	}
	first := lost("rerun")

	_, err := m.Rerun(ctx, first.PendingID, "mallory", nil, "")
	assert.ErrorIs(t, err, machine.ErrForbidden, "not among its approvers")
	_, err = m.Rerun(ctx, first.PendingID, "", nil, "")
	assert.ErrorIs(t, err, machine.ErrInvalid)

	again, err := m.Rerun(ctx, first.PendingID, "bob", nil, "checked: the deploy did not happen")
	require.NoError(t, err)
	assert.Equal(t, machine.PendingID("rerun", "c1"+machine.RerunSuffix), again.PendingID)
	assert.Equal(t, first.PendingID, again.RerunOf)
	assert.Equal(t, machine.StateScheduled, again.Status)
	assert.True(t, again.Runnable(time.Now()))
	assert.Equal(t, first.ToolArguments, again.ToolArguments)
	assert.Equal(t, first.CallerBotID, again.CallerBotID)
	assert.Equal(t, "bob", again.LastTransition.Actor)
	assert.Equal(t, machine.DecidedByHuman, again.DecidedBy)
	assert.Equal(t, "bob", again.ApprovedOrRejectedByUserID)
	assert.Contains(t, again.StatusReason, "checked: the deploy did not happen")

	same, err := m.Rerun(ctx, first.PendingID, "bob", nil, "")
	require.NoError(t, err, "asked again by bob: the same answer")
	assert.Equal(t, again.PendingID, same.PendingID)
	_, err = m.Rerun(ctx, first.PendingID, "alice", nil, "")
	assert.ErrorIs(t, err, machine.ErrConflict, "run again once")
	assert.ErrorContains(t, err, "bob ran it again already")

	// A call that finished as it should is not run again.
	_, err = m.Rerun(ctx, again.PendingID, "bob", nil, "")
	assert.ErrorIs(t, err, machine.ErrConflict)
	_, err = m.Claim(ctx, again.PendingID, "exec-2", time.Minute)
	require.NoError(t, err)
	_, err = m.Complete(ctx, again.PendingID, machine.Outcome{Holder: "exec-2"})
	require.NoError(t, err)
	_, err = m.Rerun(ctx, again.PendingID, "bob", nil, "")
	assert.ErrorIs(t, err, machine.ErrConflict)
	assert.ErrorContains(t, err, "only a call whose outcome is unknown is run again; it is COMPLETED_SUCCESS")
}

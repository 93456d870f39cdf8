package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// destroyQuorum asks about every call, and for two of alice, bob and
// carol to approve a terraform destroy.
const destroyQuorum = `
default:
  requiresApprovalTools: all
  quorum:
    "Bash(terraform destroy *)": {required: 2, of: [alice, bob, carol]}
`

// TestCLI_QuorumTakesEachApprovalAndShowsWhoIsStillNeeded: under a 2-of-3
// quorum, the first approve is recorded and says who is still needed,
// the same approver again is refused, pending and show say how far the
// call is, and the second approver's approve approves it.
func TestCLI_QuorumTakesEachApprovalAndShowsWhoIsStillNeeded(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, destroyQuorum)
	ctx := t.Context()
	e, err := agent(t, url).Submit(ctx, bashCall("conv-q", "destroy", "terraform destroy -auto-approve"))
	require.NoError(t, err)
	require.NotNil(t, e.Quorum)

	r := cli(t, url, "approve", e.PendingID, as(t, url, "alice"), "--reason", "planned teardown")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, e.PendingID+": recorded, still pending: 1 of 2 approvals; still needed: one of bob, carol\n", r.stdout)

	r = cli(t, url, "approve", e.PendingID, as(t, url, "alice"))
	assert.Equal(t, 1, r.code, "the same approver twice counts once")
	assert.Contains(t, r.stderr, "alice approved this call already")

	r = cli(t, url, "pending", "--conversation", "conv-q")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^conv-q\.destroy\s+Bash\s+PENDING_APPROVAL \(1/2\)\s`, r.stdout)
	r = cli(t, url, "show", e.PendingID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `Quorum:\s+1 of 2 approvals; still needed: one of bob, carol`, r.stdout)
	assert.Regexp(t, `approved alice, .*: planned teardown`, r.stdout)

	r = cli(t, url, "approve", e.PendingID, as(t, url, "carol"), "--scope", "session")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "a call under a quorum records no grant", "no grant from a call under a quorum")

	r = cli(t, url, "approve", e.PendingID, as(t, url, "carol"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "approved "+e.PendingID+" (Bash) as carol")
	got, err := agent(t, url).Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, got.Status)
}

// TestCLI_ABatchVotesOnACallUnderAQuorum: approve --match counts a call
// under a quorum that it does not settle as one vote, and says so, apart
// from the calls it decides; the call stays pending.
func TestCLI_ABatchVotesOnACallUnderAQuorum(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, destroyQuorum)
	ctx := t.Context()
	bot := agent(t, url)
	destroy, err := bot.Submit(ctx, bashCall("conv-qb", "destroy", "terraform destroy -auto-approve"))
	require.NoError(t, err)
	plan, err := bot.Submit(ctx, bashCall("conv-qb", "plan", "terraform plan"))
	require.NoError(t, err)
	bob := as(t, url, "bob")

	r := cli(t, url, "approve", "--match", "Bash(terraform *)", "--conversation", "conv-qb", "--dry-run", bob)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would have approved 1 call, voted on 1 (dry run, nothing decided):\n")

	r = cli(t, url, "approve", "--match", "Bash(terraform *)", "--conversation", "conv-qb", bob)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "approved 1 call, voted on 1, skipped 0\n")
	assert.Contains(t, r.stdout, "  approved "+plan.PendingID+" (Bash, from bot-1)\n")
	assert.Contains(t, r.stdout, "  voted on "+destroy.PendingID+" (Bash, from bot-1), still pending: 1 of 2 approvals; still needed: one of alice, carol\n")
	got, err := bot.Get(ctx, destroy.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status, "one vote of two")
}

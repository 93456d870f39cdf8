package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_DecidingEveryCallAPatternCovers: approve --match previews with
// --dry-run, then approves every pending call the pattern covers in the
// conversation, skipping what someone decided first; reject --match
// does the same the other way. A Bash pattern covers a line only if it
// covers every command in it.
func TestCLI_DecidingEveryCallAPatternCovers(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: all}\n")
	ctx := t.Context()
	bot := agent(t, url)
	var pushes []string
	for i := range 3 {
		e, err := bot.Submit(ctx, bashCall("conv-b", fmt.Sprint("push-", i), "git push origin main"))
		require.NoError(t, err)
		pushes = append(pushes, e.PendingID)
	}
	sneaky, err := bot.Submit(ctx, bashCall("conv-b", "sneaky", "git push origin main && rm -rf /"))
	require.NoError(t, err)
	other, err := bot.Submit(ctx, bashCall("conv-other", "push", "git push origin main"))
	require.NoError(t, err)
	alice := as(t, url, "alice")
	r := cli(t, url, "reject", pushes[0], alice, "--reason", "not that one")
	require.Equal(t, 0, r.code, r.stderr)

	r = cli(t, url, "approve", "--match", "Bash(git push *)", "--conversation", "conv-b", "--dry-run", alice)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would have approved 2 calls (dry run, nothing decided)")
	for _, id := range pushes[1:] {
		got, err := bot.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, machine.StatePendingApproval, got.Status, "a dry run decides nothing")
	}

	r = cli(t, url, "approve", "--match", "Bash(git push *)", "--conversation", "conv-b", alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	reply := decode[wire.DecideMatchingReply](t, []byte(r.stdout))
	var decided []string
	for _, m := range reply.Decided {
		decided = append(decided, m.Entry.PendingID)
		assert.Equal(t, "alice", m.Entry.ApprovedOrRejectedByUserID)
	}
	assert.ElementsMatch(t, pushes[1:], decided)
	for id, want := range map[string]machine.State{
		sneaky.PendingID: machine.StatePendingApproval, // not every command is a git push
		other.PendingID:  machine.StatePendingApproval, // another conversation
		pushes[0]:        machine.StateRejectedByUser,
	} {
		got, err := bot.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, got.Status, id)
	}

	r = cli(t, url, "reject", "--match", "Bash", "--reason", "not today", alice)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "rejected 2 calls, skipped 0")
	got, err := bot.Get(ctx, sneaky.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StateRejectedByUser, got.Status)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", "--match", "Bash", "--scope", "session"}, "--match: approves each call once, as asked: no --scope or --args"},
		{[]string{"approve", pushes[1], "--match", "Bash"}, "--match: decides the calls it matches: give no ID"},
		{[]string{"approve"}, "missing the call's ID, or --match PATTERN"},
		{[]string{"reject", "--match", "Bash"}, "--reason: required"},
		{[]string{"approve", "--match", "Bash("}, "match"},
	} {
		r := cli(t, url, append(c.args, alice)...)
		assert.NotEqual(t, 0, r.code, "%v", c.args)
		assert.Contains(t, r.stderr, c.want, "%v", c.args)
	}
	r = cli(t, url, "approve", "--match", "deploy", alice)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "no pending calls match deploy")
}

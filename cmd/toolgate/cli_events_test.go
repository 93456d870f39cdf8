package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_EventsListsAndFollowsTransitions: `toolgate events` prints a
// line a transition (its sequence first), as JSON lines with --json, and
// --follow --since SEQ prints each transition after that event as it
// happens, none before it.
func TestCLI_EventsListsAndFollowsTransitions(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: all}\n")
	ctx := t.Context()
	bot := agent(t, url)
	alice := as(t, url, "alice")
	first, err := bot.Submit(ctx, bashCall("conv-ev", "1", "make test"))
	require.NoError(t, err)
	require.Zero(t, cli(t, url, "approve", first.PendingID, alice, "--reason", "fine").code)

	var lines []string
	bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the two transitions listed", func() (bool, any) {
		r := cli(t, url, "events", alice)
		require.Zero(t, r.code, r.stderr)
		lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
		return len(lines) == 2, r.stdout
	})
	assert.Regexp(t, `^\d+  \S+Z  `+first.PendingID+`  Bash  approval_required  by policy`, lines[0])
	assert.Regexp(t, `^\d+  \S+Z  `+first.PendingID+`  Bash  approval_granted  by alice  “fine”$`, lines[1])
	last, err := strconv.ParseUint(strings.Fields(lines[1])[0], 10, 64)
	require.NoError(t, err)

	r := cli(t, url, "events", alice, "--json", "--type", "approval_granted")
	require.Zero(t, r.code, r.stderr)
	var ev wire.StreamEvent
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ev), r.stdout)
	assert.Equal(t, last, ev.Seq)
	assert.Equal(t, "tool.approval_granted", ev.Subject)

	// Followed from the approval on: the next call's transitions only.
	fctx, stop := context.WithCancel(ctx)
	var out bustest.Buffer
	done := make(chan int, 1)
	go func() {
		args := []string{"events", "--follow", "--since", strconv.FormatUint(last, 10), alice, "--nats", url, "--data", servetest.DataDir(t, url)}
		done <- run(fctx, args, &out, &bytes.Buffer{})
	}()
	second, err := bot.Submit(ctx, bashCall("conv-ev", "2", "make lint"))
	require.NoError(t, err)
	require.Zero(t, cli(t, url, "reject", second.PendingID, alice, "--reason", "not now").code)
	bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the second call's transitions followed", func() (bool, any) {
		return strings.Contains(out.String(), "approval_rejected"), out.String()
	})
	stop()
	assert.Zero(t, <-done)
	assert.NotContains(t, out.String(), first.PendingID, "nothing from before --since")
	assert.Contains(t, out.String(), second.PendingID+"  Bash  approval_required")

	r = cli(t, url, "events", alice, "--since", "soon")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--since: want an event's sequence or a duration")
}

package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// An id as long as a subject may not be (here a caller's: callers'
// announcements are published on a subject naming them) is refused with
// the field named, and serve goes on serving. An entry an older version
// stored with such an id is relayed, read and listed without costing serve
// its connection, also after a restart on the same data directory: once,
// one such caller cut serve off NATS for good, on every start.
func TestBounds_AnOverLongIDNeverCostsServeItsConnection(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	opts := toolgatetest.Options{Policy: "default:\n  requiresApprovalTools: [deploy]\n", Configure: func(c *server.Config) { c.Data = data }}
	long := strings.Repeat("c", 10_000)
	const oldID = "old.long"

	// serves checks that an ordinary call is asked about and decided.
	serves := func(t *testing.T, g *toolgatetest.Gate, id string) {
		t.Helper()
		e, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "deploy", CallerBotID: "bot", ConversationID: "bounds"})
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, e.Status)
		_, err = g.Client.Decide(t.Context(), wire.DecideRequest{PendingID: e.PendingID, Approved: true})
		require.NoError(t, err)
	}

	t.Run("first start", func(t *testing.T) {
		g := toolgatetest.Start(t, opts)
		_, err := g.Client.Submit(t.Context(), machine.Call{ToolName: "deploy", CallerBotID: long, ConversationID: "bounds"})
		require.ErrorIs(t, err, machine.ErrInvalid)
		require.ErrorContains(t, err, "callerBotId: at most 256 bytes, got 10000")
		serves(t, g, "after-refusal")

		// An entry with the over-long caller, as an older version stored
		// it, and its event, relayed.
		e, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: "template", ToolName: "deploy", CallerBotID: "bot", ConversationID: "old"})
		require.NoError(t, err)
		e.PendingID, e.ToolCallID, e.CallerBotID = oldID, "long", long
		raw, err := json.Marshal(e)
		require.NoError(t, err)
		events, err := g.NC.SubscribeSync("tool.>")
		require.NoError(t, err)
		bustest.PutRaw(t, g.JS, 1, func(int) (string, []byte) { return oldID, raw })
		bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the old entry's event relayed", func() (bool, any) {
			msg, err := events.NextMsg(10 * time.Millisecond)
			if err != nil {
				return false, err
			}
			return strings.Contains(string(msg.Data), `"pendingId":"`+oldID+`"`), msg.Subject
		})
		serves(t, g, "after-old-entry")
	}) // stops it

	g := toolgatetest.Start(t, opts)
	got, err := g.Client.Get(t.Context(), oldID)
	require.NoError(t, err)
	require.Equal(t, long, got.CallerBotID, "the stored entry is read as it is")
	listed, err := g.Client.List(t.Context(), wire.ListRequest{ConversationID: "old"})
	require.NoError(t, err)
	require.NotEmpty(t, listed)
	serves(t, g, "after-restart")
}

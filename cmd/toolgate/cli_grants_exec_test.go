package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_AGrantOfACallServeRunsAtOnceIsRecorded: with serve hosting
// exec (--tools exec), an approval for the session hands the call to
// serve's executor, which is waiting for it, in the approval's own write;
// the grant is recorded all the same, whether the approval comes from the
// CLI or over HTTP: grants list shows it, and the same call again in that
// conversation runs, to its result, without asking.
func TestCLI_AGrantOfACallServeRunsAtOnceIsRecorded(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{
		Policy:    "default: {requiresApprovalTools: all}\n",
		Tokens:    "alice-token-000000001 alice approver\n",
		Configure: func(c *server.Config) { c.Tools = []string{"exec"} },
	})
	url := served(t, g)
	ctx := t.Context()
	bot := agent(t, url)
	alice := as(t, url, "alice")
	call := func(conv, id string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "exec", Arguments: json.RawMessage(`{"command":["true"]}`), CallerBotID: "bot-1", ConversationID: conv}
	}
	paths := []struct {
		name    string
		approve func(pendingID string)
	}{
		{"cli", func(id string) {
			r := cli(t, url, "approve", id, alice, "--scope", "session")
			require.Equal(t, 0, r.code, r.stderr)
			assert.Contains(t, r.stdout, "later calls like it in conversation conv-cli run without asking")
		}},
		{"http", func(id string) {
			body, _ := json.Marshal(wire.DecideRequest{Approved: true, Scope: machine.ScopeSession})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.HTTPURL+"/v1/tool-calls/"+id+"/decision", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer alice-token-000000001")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var e machine.Entry
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, http.StatusOK, resp.StatusCode, "%+v", e)
			assert.Equal(t, machine.ScopeSession, e.DecisionScope)
		}},
	}
	for _, p := range paths {
		conv := "conv-" + p.name
		first, err := bot.Submit(ctx, call(conv, "1"))
		require.NoError(t, err)
		require.Equal(t, machine.StatePendingApproval, first.Status)
		p.approve(first.PendingID)

		r := cli(t, url, "grants", "list", alice, "--json", "--conversation", conv)
		require.Equal(t, 0, r.code, r.stderr)
		grants := decode[[]wire.Grant](t, []byte(r.stdout))
		require.Len(t, grants, 1, "%s: the session grant is recorded", p.name)
		assert.Equal(t, "exec", grants[0].Pattern, p.name)
		assert.Equal(t, first.PendingID, grants[0].PendingID, p.name)

		again, err := bot.Submit(ctx, call(conv, "2"))
		require.NoError(t, err)
		require.NotEqual(t, machine.StatePendingApproval, again.Status, "%s: the same call again runs without asking", p.name)
		out, err := bot.Await(ctx, again.PendingID)
		require.NoError(t, err)
		assert.Equal(t, machine.StateCompletedSuccess, out.Entry.Status, "%s: %+v", p.name, out)
	}
}

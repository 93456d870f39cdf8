package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestInbox_AllowForThisSessionRecordsTheGrantOfACallServeRuns: with
// serve hosting exec, "Allow for this session" hands the call to serve's
// waiting executor in the approval's own write, and records the grant
// all the same: the grants list has it, and the same call again in the
// conversation runs, to its result, without asking.
func TestInbox_AllowForThisSessionRecordsTheGrantOfACallServeRuns(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInboxWith(t, "default: {requiresApprovalTools: all}\n", tokens, inboxOptions{tools: []string{"exec"}})
	exec := func(id string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "exec", Arguments: json.RawMessage(`{"command":["true"]}`), CallerBotID: "bot-1", ConversationID: "inbox-grant"}
	}
	first := in.call(exec("1"))
	require.Equal(t, machine.StatePendingApproval, first.Status)

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(1))
	p.until(`document.querySelector('` + card(first.PendingID) + ` .grant-hint').dataset.state === 'ready'`)
	p.do(click(button(first.PendingID, "session")), chromedp.WaitNotPresent(chromedp.CSS(card(first.PendingID))))

	var grants []wire.Grant
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/grants?conversationId=inbox-grant", viewerToken, nil, &grants))
	require.Len(t, grants, 1, "the session grant is recorded")
	assert.Equal(t, "exec", grants[0].Pattern)
	assert.Equal(t, first.PendingID, grants[0].PendingID)
	assert.Equal(t, "alice", grants[0].By)

	var again machine.Entry
	require.Equal(t, http.StatusCreated, in.do("POST", "/v1/tool-calls", adminToken, exec("2"), &again))
	require.NotEqual(t, machine.StatePendingApproval, again.Status, "the same call again runs without asking")
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the call run to its result", func() (bool, any) {
		e := in.entry(again.PendingID)
		return e.Status == machine.StateCompletedSuccess, e.Status
	})
}

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
	p.grantFrom(first.PendingID, "session")

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

	// Its history credits the grant, in words, and shows the result.
	h := openPage(t, browser, in.url+"/#/calls/"+again.PendingID)
	row := `li.row[data-id="` + again.PendingID + `"]`
	h.do(chromedp.WaitVisible(chromedp.CSS(row + `.row-target .timeline`)))
	timeline := h.textOnce(row+` .row-details`, "Finished", "Result")
	for _, want := range []string{"Asked by bot-1; runs without asking: a grant covers it", "Started running on", "Finished", "Result", `"exitCode": 0`} {
		assert.Contains(t, timeline, want)
	}
}

// TestInbox_AGrantSaysItsReachAndIsNarrowedByAnArgument: "Allow for this
// session…" opens a panel that says in words what the grant lets
// through, as the approver narrows it to the recipients of send_email
// (the argument the policy's matchArgument names), bounds its life or
// makes it single use; a narrowing that would not cover the call is
// refused as typed. Granted for *@acme-corp.com, the next team email
// runs and one to someone@evil.example is asked about. A high-risk call
// offers no grant at all, and a call the policy lets nobody edit no edit.
func TestInbox_AGrantSaysItsReachAndIsNarrowedByAnArgument(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, inboxPolicy+"  matchArgument: {send_email: to}\n  risk: {transfer_funds: high}\n  editable: {transfer_funds: false}\n", tokens)
	email := func(id, to string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "send_email", CallerBotID: "mailer", ConversationID: "newsletter",
			Arguments: json.RawMessage(`{"to":"` + to + `","subject":"Release notes","body":"Hello"}`)}
	}
	first := in.call(email("1", "team@acme-corp.com"))
	pay := in.call(transfer("newsletter", "2"))

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(2))
	hint := func(id string) string { return card(id) + ` .grant-hint` }
	p.until(`document.querySelector('` + hint(pay.PendingID) + `').dataset.state === 'none'`)
	assert.Contains(t, p.text(hint(pay.PendingID)), "the policy has this call approved once only, by noGrantsAtRisk high")
	for _, scope := range []string{"session", "always"} {
		assert.True(t, eval[bool](p, `document.querySelector('`+card(pay.PendingID)+` button[data-action="`+scope+`"]').disabled`), "no %s grant of a high-risk call", scope)
	}
	// Nor an edit the policy forbids (editable: false).
	assert.True(t, pay.NotEditable)
	assert.Equal(t, 0, eval[int](p, `document.querySelectorAll('`+card(pay.PendingID)+` button[data-action="edit"]').length`), "no edit offered where the policy forbids one")
	assert.Equal(t, 1, eval[int](p, `document.querySelectorAll('`+card(first.PendingID)+` button[data-action="edit"]').length`))

	p.until(`document.querySelector('` + hint(first.PendingID) + `').dataset.state === 'ready'`)
	p.do(click(button(first.PendingID, "session")), chromedp.WaitVisible(chromedp.CSS(card(first.PendingID)+` .panel-grant`)))
	said := card(first.PendingID) + ` .grant-reach`
	// It starts as narrow as the call; emptied, it covers every call.
	assert.Equal(t, "Lets any send_email call whose to matches “team@acme-corp.com” in conversation newsletter run without asking, for 8 hours.", p.text(said))
	match := card(first.PendingID) + ` input.grant-match`
	p.setField(match, "")
	assert.Equal(t, "Lets any send_email call in conversation newsletter run without asking, for 8 hours.", p.text(said))
	p.setField(match, "*@other.example")
	p.until(`!document.querySelector('` + card(first.PendingID) + ` .panel-grant .field-error').hidden`)
	assert.Contains(t, p.text(card(first.PendingID)+` .panel-grant .field-error`), "send_email(*@other.example) does not cover the call approved")
	assert.True(t, eval[bool](p, `document.querySelector('`+card(first.PendingID)+` button[data-action="confirm-grant"]').disabled`))

	p.setField(match, "*@acme-corp.com")
	p.until(`!document.querySelector('` + card(first.PendingID) + ` button[data-action="confirm-grant"]').disabled`)
	assert.Equal(t, "Lets any send_email call whose to matches “*@acme-corp.com” in conversation newsletter run without asking, for 8 hours.", p.text(said))
	p.do(click(button(first.PendingID, "confirm-grant")), chromedp.WaitNotPresent(chromedp.CSS(card(first.PendingID))))

	var grants []wire.Grant
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/grants?conversationId=newsletter", viewerToken, nil, &grants))
	require.Len(t, grants, 1)
	g := grants[0]
	assert.Equal(t, "send_email(*@acme-corp.com)", g.Pattern)
	assert.Equal(t, "to", g.Argument)
	assert.InDelta(t, g.At+8*3_600_000, g.ExpiresAt, 1, "for 8 hours")

	var team, evil machine.Entry
	require.Equal(t, http.StatusCreated, in.do("POST", "/v1/tool-calls", adminToken, email("3", "bob@acme-corp.com"), &team))
	assert.NotEqual(t, machine.StatePendingApproval, team.Status, "the next team email runs without asking")
	require.Equal(t, http.StatusCreated, in.do("POST", "/v1/tool-calls", adminToken, email("4", "someone@evil.example"), &evil))
	assert.Equal(t, machine.StatePendingApproval, evil.Status, "one to someone else is asked about")
}

package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// decisionsPolicy asks about every call and marks payments high risk
// and pushes medium.
const decisionsPolicy = inboxPolicy + `  risk:
    transfer_funds: high
    "Bash(git push *)": medium
`

// compound is a command line no one pattern covers alone: it can be
// approved once, never granted.
func compound(conv, id string) machine.Call {
	return machine.Call{ToolCallID: id, ToolName: "Bash", ConversationID: conv, CallerBotID: "release-bot",
		Arguments: json.RawMessage(`{"command":"make && rm -rf build"}`), Team: "platform"}
}

// TestInbox_DecisionsPeopleCanTrust drives what an approver sees before
// deciding (the risk first, the digest the approval binds, what a grant
// would match), the grants in force with their revoke, and deciding
// several selected calls in one request.
func TestInbox_DecisionsPeopleCanTrust(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)

	t.Run("the risk first, the digest, and what a grant would match before granting", func(t *testing.T) {
		in := startInbox(t, decisionsPolicy, tokens)
		pay := in.call(transfer("trust", "c1"))
		push := in.call(gitPush("trust", "c2"))
		search := in.call(webSearch("trust", "c3", "NATS KV"))
		both := in.call(compound("trust", "c4"))
		const secret = "ghp_abcdefghijklmnopqrstuvwxyz0123"
		leak := in.call(machine.Call{ToolCallID: "c5", ToolName: "Bash", ConversationID: "trust", CallerBotID: "release-bot", Team: "platform",
			Arguments: json.RawMessage(`{"command":"git clone https://` + secret + `@github.com/acme/tools"}`)})

		p := openPage(t, browser, in.url)
		p.signIn(aliceToken)
		p.until(cardCount(5))
		// A secret in the arguments is masked wherever the card shows them.
		shown := p.text(card(leak.PendingID))
		assert.NotContains(t, shown, secret)
		assert.Contains(t, shown, "[redacted]")
		assert.True(t, eval[bool](p, `document.querySelector('`+card(pay.PendingID)+`').firstElementChild.matches('p.risk.risk-high')`), "the risk line is the card's first")
		assert.Equal(t, "High risk", p.text(card(pay.PendingID)+` .risk`))
		assert.Equal(t, "Medium risk", p.text(card(push.PendingID)+` .risk`))
		assert.Equal(t, 0, eval[int](p, `document.querySelectorAll('`+card(search.PendingID)+` .risk').length`), "no risk, no line")
		assert.Contains(t, p.text(card(pay.PendingID)+` .digest`), "Approval binds "+pay.ArgumentsDigest)
		require.NotEmpty(t, pay.ArgumentsDigest)

		hint := func(id string) string { return card(id) + ` .grant-hint` }
		p.until(`document.querySelector('` + hint(push.PendingID) + `').dataset.state === 'ready'`)
		assert.Equal(t, "grants: Bash(git push origin release/2.8)", p.text(hint(push.PendingID)))
		p.until(`document.querySelector('` + hint(search.PendingID) + `').dataset.state === 'ready'`)
		assert.Equal(t, "grants: web_search", p.text(hint(search.PendingID)))
		p.until(`document.querySelector('` + hint(both.PendingID) + `').dataset.state === 'none'`)
		assert.Contains(t, p.text(hint(both.PendingID)), "No grant: no pattern covers this Bash call alone")
		assert.True(t, eval[bool](p, `document.querySelector('`+card(both.PendingID)+` button[data-action="session"]').disabled`), "only once is offered")
		assert.False(t, eval[bool](p, `document.querySelector('`+card(both.PendingID)+` button[data-action="approve"]').disabled`))
		var grants []wire.Grant
		require.Equal(t, http.StatusOK, in.do("GET", "/v1/grants", viewerToken, nil, &grants))
		assert.Empty(t, grants, "showing what a grant would match grants nothing")

		// The grant recorded is the one shown.
		p.grantFrom(push.PendingID, "session")
		require.Equal(t, http.StatusOK, in.do("GET", "/v1/grants", viewerToken, nil, &grants))
		require.Len(t, grants, 1)
		assert.Equal(t, "Bash(git push origin release/2.8)", grants[0].Pattern)
	})

	t.Run("the grants in force, and revoking one", func(t *testing.T) {
		in := startInbox(t, decisionsPolicy, tokens)
		push := in.call(gitPush("held", "c1"))
		search := in.call(webSearch("held", "c2", "weather"))
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+push.PendingID+"/decision", aliceToken,
			wire.DecideRequest{Approved: true, Scope: machine.ScopeSession}, nil))

		p := openPage(t, browser, in.url+"/#grants")
		p.signIn(bobToken)
		p.until(`document.getElementById('grants').dataset.state === 'ready'`)
		p.until(`document.querySelectorAll('#grant-rows li.grant').length === 1`)
		var grants []wire.Grant
		require.Equal(t, http.StatusOK, in.do("GET", "/v1/grants", viewerToken, nil, &grants))
		require.Len(t, grants, 1)
		row := `li.grant[data-id="` + grants[0].ID + `"]`
		text := p.text(row)
		for _, want := range []string{"Session", "matches Bash(git push origin release/2.8)", "conversation held", "granted by alice", "from call " + push.PendingID, "until revoked"} {
			assert.Contains(t, text, want)
		}
		assert.Equal(t, "#/calls/"+push.PendingID, eval[string](p, `document.querySelector('`+row+` a.grant-call').getAttribute('href')`))
		assert.Equal(t, "1", p.text("#grants-count"))

		// One granted while the page is open appears: always, for two
		// hours, single use.
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+search.PendingID+"/decision", aliceToken,
			wire.DecideRequest{Approved: true, Scope: machine.ScopeAlways, ForMs: 7_200_000, SingleUse: true}, nil))
		p.until(`document.querySelectorAll('#grant-rows li.grant').length === 2`)
		always := `li.grant[data-pattern="web_search"]`
		text = p.text(always)
		for _, want := range []string{"Always", "team research", "single use", "ends "} {
			assert.Contains(t, text, want)
		}

		// Revoke: gone from the page and from toolgate.
		p.do(click(chromedp.CSS(row+` button[data-action="revoke"]`)), chromedp.WaitNotPresent(chromedp.CSS(row)))
		require.Equal(t, http.StatusOK, in.do("GET", "/v1/grants", viewerToken, nil, &grants))
		require.Len(t, grants, 1)
		assert.Equal(t, "web_search", grants[0].Pattern)
		p.until(`document.getElementById('grants-count').textContent === '1'`)

		// A viewer sees the grants, and no button to revoke them. (The
		// tabs share the origin's storage: sign out first.)
		p.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
		q := openPage(t, browser, in.url+"/#grants")
		q.signIn(viewerToken)
		q.until(`document.querySelectorAll('#grant-rows li.grant').length === 1`)
		assert.Equal(t, 0, eval[int](q, `document.querySelectorAll('#grant-rows button').length`))
	})

	t.Run("deciding the selected calls in one request", func(t *testing.T) {
		in := startInbox(t, decisionsPolicy, tokens)
		s1 := in.call(webSearch("batch", "s1", "one"))
		s2 := in.call(webSearch("batch", "s2", "two"))
		pay := in.call(transfer("batch", "s3"))
		push := in.call(gitPush("batch", "s4"))

		p := openPage(t, browser, in.url)
		p.signIn(aliceToken)
		p.until(cardCount(4))
		p.until(live)
		tick := func(id string) { p.do(click(chromedp.CSS(card(id) + ` input.select`))) }
		assert.True(t, eval[bool](p, `document.getElementById('batch-approve').disabled`), "nothing selected yet")
		for _, e := range []machine.Entry{s1, s2, pay} {
			tick(e.PendingID)
		}
		assert.Equal(t, "3 selected · 1 high risk · est. cost 2.44", p.text("#batch-count"))

		// bob rejects one the page cannot hear of: its answer says so.
		in.outage(true)
		p.until(`document.getElementById('conn').dataset.state === 'reconnecting'`)
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+s2.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: false, Reason: "dup"}, nil))
		// A selection holding a high-risk call asks first, saying so.
		p.do(click(chromedp.ID("batch-approve")), chromedp.WaitVisible(chromedp.ID("batch-confirm")))
		assert.Equal(t, "Approve 3 calls, with 1 high-risk (transfer_funds) and an estimated cost of 2.44 in all?", p.text("#batch-confirm-text"))
		assert.Equal(t, machine.StatePendingApproval, in.entry(s1.PendingID).Status, "nothing decided before the confirmation")
		p.do(click(chromedp.ID("batch-confirm-approve")), chromedp.WaitVisible(chromedp.ID("batch-result")))
		assert.Equal(t, "Approved 2, skipped 1", p.text("#batch-result-title"))
		item := func(id string) string { return `#batch-items li[data-id="` + id + `"]` }
		assert.Equal(t, "decided", eval[string](p, `document.querySelector('`+item(s1.PendingID)+`').dataset.outcome`))
		assert.Equal(t, "decided", eval[string](p, `document.querySelector('`+item(pay.PendingID)+`').dataset.outcome`))
		assert.Equal(t, "skipped", eval[string](p, `document.querySelector('`+item(s2.PendingID)+`').dataset.outcome`))
		assert.Contains(t, p.text(item(s2.PendingID)), "Already rejected by bob.")
		assert.Contains(t, p.text(card(s2.PendingID)+` .card-error`), "Already rejected by bob.")
		p.do(chromedp.WaitNotPresent(chromedp.CSS(card(s1.PendingID))), chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
		for _, e := range []machine.Entry{s1, pay} {
			got := in.entry(e.PendingID)
			assert.Equal(t, machine.StateApproved, got.Status)
			assert.Equal(t, "alice", got.ApprovedOrRejectedByUserID)
		}
		assert.Equal(t, "bob", in.entry(s2.PendingID).ApprovedOrRejectedByUserID, "decided once, by bob")
		assert.Equal(t, machine.StatePendingApproval, in.entry(push.PendingID).Status, "not selected, not decided")
		in.outage(false)
		p.until(live)

		// Reject selected, with the reason every agent is told.
		tick(push.PendingID)
		p.do(click(chromedp.ID("batch-reject")), chromedp.WaitVisible(chromedp.ID("batch-reason")))
		p.do(chromedp.SendKeys(chromedp.ID("batch-reason"), "release freeze"), click(chromedp.ID("batch-confirm-reject")))
		p.do(chromedp.WaitNotPresent(chromedp.CSS(card(push.PendingID))))
		p.until(`document.getElementById('batch-result-title').textContent === 'Rejected 1, skipped 0'`)
		got := in.entry(push.PendingID)
		assert.Equal(t, machine.StateRejectedByUser, got.Status)
		assert.Equal(t, "release freeze", got.StatusReason)

		// A viewer has nothing to select. (The tabs share the origin's
		// storage: sign out first.)
		p.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
		q := openPage(t, browser, in.url)
		q.signIn(viewerToken)
		q.do(chromedp.WaitVisible(chromedp.ID("viewer-notice")))
		q.until(live)
		assert.Equal(t, 0, eval[int](q, `document.querySelectorAll('input.select').length`))
		assert.True(t, eval[bool](q, `document.getElementById('batch').hidden`))
	})
}

package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// quorumPolicy needs two of alice, bob and carol to approve a payment,
// and lets carol decide any call nobody decided in a minute.
const quorumPolicy = inboxPolicy + `  approvers: [alice, bob]
  quorum:
    transfer_funds: {required: 2, of: [alice, bob, carol]}
  escalate:
    - {afterMs: 60000, to: [carol]}
`

// TestInbox_Quorum: a call under a quorum shows how far it is and who is
// still needed, offers only approve and reject, takes the approver's
// approval without closing, tells them they approved, and closes once a
// second approver approves.
func TestInbox_Quorum(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, quorumPolicy, tokens)
	pay := in.call(transfer("quorum", "c1"))
	require.NotNil(t, pay.Quorum)

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(1))
	p.until(live)
	q := card(pay.PendingID) + ` .quorum`
	assert.Equal(t, "0 of 2 approvals · still needed: 2 of alice, bob, carol", p.text(q))
	assert.Equal(t, 0, eval[int](p, `document.querySelectorAll('`+card(pay.PendingID)+` button[data-action="session"], `+card(pay.PendingID)+` button[data-action="edit"]').length`),
		"no grant and no edit for a call under a quorum")

	p.do(click(button(pay.PendingID, "approve")))
	p.until(`(document.querySelector('` + q + `') || {}).textContent === '1 of 2 approvals (alice) · still needed: 1 of bob, carol'`)
	assert.Contains(t, p.text(card(pay.PendingID)+` .card-note`), "You approved this call")
	assert.Equal(t, machine.StatePendingApproval, in.entry(pay.PendingID).Status, "one approval of two")

	require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+pay.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: true}, nil))
	// Met, the card says so once, and needs nobody more, before it goes.
	p.until(`(document.querySelector('` + q + `') || {}).textContent === '2 of 2 approvals (alice, bob)'`)
	p.do(chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
	got := in.entry(pay.PendingID)
	assert.Equal(t, machine.StateApproved, got.Status)
	assert.Equal(t, 2, got.Approvals())
}

// TestInbox_BatchVotesOnAQuorumCall: approving a selection that holds a
// call under a quorum (and over the cost limit, so the page asks first)
// gives that call one vote, reported as a vote; its card stays, saying
// how far it is, and the others are decided.
func TestInbox_BatchVotesOnAQuorumCall(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, quorumPolicy+"  requireApprovalAboveCost: 1\n", tokens)
	pay := in.call(transfer("quorum-batch", "c1"))
	search := in.call(webSearch("quorum-batch", "c2", "NATS"))

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(2))
	p.until(live)
	for _, e := range []machine.Entry{pay, search} {
		p.do(click(chromedp.CSS(card(e.PendingID) + ` input.select`)))
	}
	assert.Equal(t, "2 selected · 1 over the cost limit · est. cost 2.42 · 1 under a quorum (your approval is one vote)", p.text("#batch-count"))
	// A selection holding a call over the cost limit asks first.
	p.do(click(chromedp.ID("batch-approve")), chromedp.WaitVisible(chromedp.ID("batch-confirm")))
	assert.Equal(t, "Approve 2 calls, with 1 over the cost limit (transfer_funds) and an estimated cost of 2.42 in all?", p.text("#batch-confirm-text"))
	p.do(click(chromedp.ID("batch-confirm-approve")), chromedp.WaitVisible(chromedp.ID("batch-result")))
	assert.Equal(t, "Approved 1, voted on 1, skipped 0", p.text("#batch-result-title"))
	vote := `#batch-items li[data-id="` + pay.PendingID + `"]`
	assert.Equal(t, "voted", eval[string](p, `document.querySelector('`+vote+`').dataset.outcome`))
	assert.Contains(t, p.text(vote), "your vote")
	assert.Contains(t, p.text(vote), "1 of 2 approvals (alice)")

	p.do(chromedp.WaitNotPresent(chromedp.CSS(card(search.PendingID))))
	p.until(`(document.querySelector('` + card(pay.PendingID) + ` .quorum') || {}).textContent === '1 of 2 approvals (alice) · still needed: 1 of bob, carol'`)
	assert.Equal(t, machine.StatePendingApproval, in.entry(pay.PendingID).Status, "one vote of two")
	assert.Equal(t, machine.StateApproved, in.entry(search.PendingID).Status)
	assert.Equal(t, 1, eval[int](p, `document.querySelectorAll('article.card').length`), "the quorum call's card stays")
}

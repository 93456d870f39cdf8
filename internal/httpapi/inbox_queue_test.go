package httpapi_test

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/machine"
)

// TestInbox_TheQueueFilteredByRiskAndCallerAndOrdered: the waiting calls
// (their costs in the policy's currency)
// are filtered by caller, team and risk (at least medium), and ordered by
// deadline, risk or cost, and grouped by conversation; a call without a
// template reads in words.
func TestInbox_TheQueueFilteredByRiskAndCallerAndOrdered(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, decisionsPolicy+"  currency: EUR\n", tokens)
	in.call(webSearch("queue", "c1", "NATS"))
	pay := in.call(transfer("queue", "c2"))
	push := in.call(gitPush("queue", "c3"))
	mail := in.call(machine.Call{ToolCallID: "c4", ToolName: "send_email", CallerBotID: "mailer", ConversationID: "queue",
		Arguments: json.RawMessage(`{"body":"Hello,\nthe notes are out.","subject":"Release notes","to":"team@acme-corp.com"}`)})

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(4))
	order := func() []string {
		return eval[[]string](p, `[...document.querySelectorAll('article.card')].map((c) => c.dataset.id)`)
	}
	assert.Contains(t, p.text(card(mail.PendingID)), "send_email to team@acme-corp.com: “Release notes”", "without a template, the call in words, not JSON")
	// An email reads as one: To first, its body's lines as lines.
	assert.Equal(t, "To\nteam@acme-corp.com\nSubject\nRelease notes\n\nHello,\nthe notes are out.", p.text(card(mail.PendingID)+` .as-email`))
	pick := func(id, value string) {
		eval[bool](p, `(() => { const el = document.getElementById(`+jsString(id)+`); el.value = `+jsString(value)+`; el.dispatchEvent(new Event('change')); return true })()`)
	}

	pick("f-sort", "risk")
	p.until(`document.querySelector('article.card').dataset.id === '` + pay.PendingID + `'`)
	assert.Equal(t, []string{pay.PendingID, push.PendingID}, order()[:2], "high, medium, then none")
	pick("f-sort", "cost")
	assert.Equal(t, pay.PendingID, order()[0], "2.40 first")

	pick("f-risk", "medium")
	p.until(cardCount(2))
	assert.ElementsMatch(t, []string{pay.PendingID, push.PendingID}, order())
	assert.Contains(t, eval[string](p, `location.search`), "risk=medium", "kept in the address")

	p.setField("#f-caller", "release-bot")
	p.until(cardCount(1))
	assert.Equal(t, []string{push.PendingID}, order())
	assert.Equal(t, "Showing 1 of 4 waiting calls.", p.text("#inbox-note"))
	p.setField("#f-caller", "")
	p.setField("#f-team", "finance")
	p.until(cardCount(1))
	assert.Equal(t, []string{pay.PendingID}, order())

	// Grouped by conversation: each conversation's calls under its
	// heading, the groups in the order of their first call.
	p.do(click(chromedp.ID("f-clear")))
	p.until(cardCount(4))
	other := in.call(webSearch("other", "c5", "weather"))
	p.until(cardCount(5))
	pick("f-group", "conversation")
	p.until(`document.querySelectorAll('#cards .group-head').length === 2`)
	assert.Equal(t, []string{"queue · 4 waiting", "other · 1 waiting"}, eval[[]string](p, `[...document.querySelectorAll('#cards .group-head')].map((h) => h.textContent)`))
	assert.Equal(t, other.PendingID, eval[string](p, `document.querySelector('#cards .group-head[data-conversation="other"]').nextElementSibling.dataset.id`))

	// Compact rows: a line a call (its summary, caller, team, cost and
	// deadline); a click opens one, with its buttons.
	pick("f-view", "compact")
	p.until(`document.getElementById('cards').classList.contains('compact')`)
	heights := eval[[]float64](p, `[...document.querySelectorAll('article.card')].map((c) => c.getBoundingClientRect().height)`)
	for _, h := range heights {
		assert.Less(t, h, 140.0, "a row, not a card: %v", heights)
	}
	assert.Contains(t, p.text(card(pay.PendingID)+` .card-line`), "from finance-agent · team finance · est. cost 2.40 EUR", "with the policy's currency")
	assert.False(t, eval[bool](p, `document.querySelector('`+card(pay.PendingID)+` .actions').checkVisibility()`))
	p.do(click(chromedp.CSS(card(pay.PendingID) + ` .description`)))
	p.until(`document.querySelector('` + card(pay.PendingID) + ` .actions').checkVisibility()`)
	assert.Greater(t, eval[float64](p, `document.querySelector('`+card(pay.PendingID)+`').getBoundingClientRect().height`), 200.0, "the one opened shows all of it")
}

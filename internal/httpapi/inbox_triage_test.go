package httpapi_test

import (
	"fmt"
	"testing"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// currentCard is the id of the card the keys act on, or "" when none is.
const currentCard = `((document.querySelector('article.card-current') || {dataset: {}}).dataset.id || '')`

// press sends keys to the page as typed: to whatever has the focus.
func (p *page) press(keys string) {
	p.t.Helper()
	p.do(chromedp.KeyEvent(keys))
}

// TestInbox_TriageWithTheKeyboard: ten waiting calls are decided with the
// keyboard alone. j makes the first card current, a approves the current
// call once, r opens its reject panel with the reason focused (the
// reason's own j, a, r and x are letters there, not keys) and Enter
// rejects; after each decision the next card is current, and a
// confirmation says what was decided. On the way k moves back, x ticks
// the current card for the batch bar and unticks it, ? shows the keys
// (and while they show, a decides nothing; nor does Ctrl+A), and e opens
// the edit panel, which Escape closes with nothing decided.
func TestInbox_TriageWithTheKeyboard(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, inboxPolicy, tokens)
	for i := range 10 {
		in.call(webSearch("triage", fmt.Sprintf("c%d", i), fmt.Sprintf("release notes %d", i)))
	}

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(10))
	p.until(live)
	order := eval[[]string](p, `[...document.querySelectorAll('article.card')].map((c) => c.dataset.id)`)
	require.Len(t, order, 10)
	isCurrent := func(id string) string { return currentCard + ` === ` + jsString(id) }
	assert.Empty(t, eval[string](p, currentCard), "no card is current before a key")

	p.press("j")
	p.until(isCurrent(order[0]))
	p.press("jj")
	p.until(isCurrent(order[2]))
	p.press("kk")
	p.until(isCurrent(order[0]))
	assert.True(t, eval[bool](p, `document.activeElement.matches('`+card(order[0])+`')`), "the current card has the focus")

	p.press("x")
	p.until(`document.getElementById('batch-count').textContent.startsWith('1 selected')`)
	assert.True(t, eval[bool](p, `document.querySelector('`+card(order[0])+` input.select').checked`))
	p.press("x")
	p.until(`document.getElementById('batch-count').textContent === 'Select calls to decide them together'`)

	p.press("?")
	p.until(`document.getElementById('keys-help').open`)
	help := p.text("#keys-help")
	for _, want := range []string{"Next call, previous call", "Approve the current call, once", "Reject it", "Approve it with edited arguments", "Select it"} {
		assert.Contains(t, help, want)
	}
	p.press("a") // the help is open: no key decides
	p.press(kb.Escape)
	p.until(`!document.getElementById('keys-help').open`)

	p.do(chromedp.KeyEvent("a", chromedp.KeyModifiers(chromedp.ModifierCtrl))) // Ctrl+A is the browser's, not a key here
	p.press("e")
	p.until(`document.activeElement.matches('` + card(order[0]) + ` textarea.edit-args')`)
	p.press(kb.Escape)
	p.until(`!document.querySelector('` + card(order[0]) + ` .panel')`)
	assert.Equal(t, machine.StatePendingApproval, in.entry(order[0]).Status, "nothing was decided yet")

	reasons := map[string]string{}
	for i, id := range order {
		p.until(isCurrent(id))
		want := "Approved web_search (" + id + ")"
		if i%3 == 1 {
			reasons[id] = fmt.Sprintf("just a rerun of call %d, already answered", i-1)
			p.press("r")
			p.until(`document.activeElement.matches('` + card(id) + ` input.reason')`)
			p.press(reasons[id] + kb.Enter)
			want = "Rejected web_search (" + id + ") — “" + reasons[id] + "”"
		} else {
			p.press("a")
		}
		p.do(chromedp.WaitNotPresent(chromedp.CSS(card(id))))
		p.textOnce("#toast", want, "View in history")
	}
	p.do(chromedp.WaitVisible(chromedp.ID("empty")))
	assert.Equal(t, "#/calls/"+order[9], eval[string](p, `document.getElementById('toast-link').getAttribute('href')`))
	assert.Equal(t, "toolgate inbox", eval[string](p, `document.title`))

	for _, id := range order {
		e := in.entry(id)
		assert.Equal(t, "alice", e.ApprovedOrRejectedByUserID, id)
		if reason, ok := reasons[id]; ok {
			assert.Equal(t, machine.StateRejectedByUser, e.Status, id)
			assert.Equal(t, reason, e.StatusReason, id)
			continue
		}
		assert.Equal(t, machine.StateApproved, e.Status, id)
		assert.Equal(t, machine.ScopeOnce, e.DecisionScope, "a approves once, never a grant: %s", id)
	}
}

// TestInbox_ANewCallBelowTheFoldIsAnnounced: a call that arrives while
// the page is open, its card below the fold, is announced where the eye
// is: a "1 new" pill at the top of the list, the count in the title and
// on the favicon, and a "New" mark on its card. The pill brings the card
// into view and makes it current; once seen, the pill and then the mark
// go. Notifications are turned on only by their button.
func TestInbox_ANewCallBelowTheFoldIsAnnounced(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, inboxPolicy, tokens)
	for i := range 8 {
		in.call(transfer("fold", fmt.Sprintf("c%d", i)))
	}

	p := openPage(t, browser, in.url)
	p.signIn(aliceToken)
	p.until(cardCount(8))
	p.until(live)
	p.until(`document.title === '(8) toolgate inbox'`)
	assert.True(t, eval[bool](p, `document.getElementById('new-pill').hidden`), "listed calls are not new")
	assert.Zero(t, eval[int](p, `document.querySelectorAll('.pill-new').length`))

	late := in.call(webSearch("fold", "late", "what arrived below the fold"))
	newCard := card(late.PendingID)
	p.do(chromedp.WaitReady(chromedp.CSS(newCard)))
	assert.True(t, eval[bool](p, `document.querySelector('`+newCard+`').getBoundingClientRect().top > innerHeight`),
		"the newest call's card sorts last, below the fold")
	p.until(`!document.getElementById('new-pill').hidden`)
	assert.Equal(t, "1 new ↓", p.text("#new-pill"))
	assert.True(t, eval[bool](p, `(() => { const r = document.getElementById('new-pill').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight })()`),
		"the pill is in view")
	assert.Equal(t, "New", p.text(newCard+` .pill-new`))
	p.until(`document.title === '(9) toolgate inbox'`)
	p.until(`decodeURIComponent(document.querySelector('link[rel="icon"]').href).includes('>9</text>')`)

	p.do(click(chromedp.ID("new-pill")))
	p.until(currentCard + ` === ` + jsString(late.PendingID))
	p.until(`document.getElementById('new-pill').hidden`)
	assert.True(t, eval[bool](p, `(() => { const r = document.querySelector('`+newCard+`').getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight })()`),
		"the card is in view")
	p.until(`!document.querySelector('` + newCard + ` .pill-new')`)

	// Notifications: asked for on a click, and on once the browser allows them.
	assert.Equal(t, "Notify me of new calls", p.text("#notify"))
	_, err := chromedp.CallBrowser(p.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: "notifications"}, Setting: cdpbrowser.PermissionSettingGranted, Origin: in.url})
	require.NoError(t, err)
	p.do(click(chromedp.ID("notify")))
	p.until(`document.getElementById('notify').getAttribute('aria-pressed') === 'true'`)
	assert.Equal(t, "Notifications on", p.text("#notify"))
	p.do(click(chromedp.ID("notify")))
	p.until(`document.getElementById('notify').getAttribute('aria-pressed') === 'false'`)
}

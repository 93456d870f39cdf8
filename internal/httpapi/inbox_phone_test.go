package httpapi_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
)

// TestInbox_ACardFitsAPhone: on a 390 px wide phone a waiting call's
// card fits the screen, with one primary action: Approve across the
// card, the other ways to approve smaller below it.
func TestInbox_ACardFitsAPhone(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, inboxPolicy, tokens)
	push := in.call(gitPush("phone", "c1"))

	p := openPage(t, browser, in.url)
	p.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	p.signIn(aliceToken)
	p.until(cardCount(1))
	p.until(`document.querySelector('` + card(push.PendingID) + ` .grant-hint').dataset.state === 'ready'`)
	size := func(sel string) map[string]float64 {
		return eval[map[string]float64](p, `(() => { const r = document.querySelector('`+sel+`').getBoundingClientRect(); return { width: r.width, height: r.height }; })()`)
	}
	c := size(card(push.PendingID))
	assert.LessOrEqual(t, c["height"], 844.0, "the card fits the screen's height")
	assert.LessOrEqual(t, c["width"], 390.0)
	approve := size(card(push.PendingID) + ` button[data-action="approve"]`)
	assert.Greater(t, approve["width"], c["width"]*0.8, "Approve is across the card")
	for _, action := range []string{"session", "always", "edit"} {
		b := size(card(push.PendingID) + ` button[data-action="` + action + `"]`)
		assert.Less(t, b["height"], approve["height"], "%s is smaller than Approve", action)
	}
	actions := size(card(push.PendingID) + ` .actions`)
	assert.Less(t, actions["height"], 844.0/3, "the buttons take less than a third of the screen")
}

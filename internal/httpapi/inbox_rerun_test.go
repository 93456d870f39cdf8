package httpapi_test

import (
	"errors"
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

// TestInbox_ACallWhoseOutcomeIsUnknownIsRunAgainByAnApprover: a push
// whose executor was lost mid-run reads "Result unknown" in the history,
// not "Failed"; its timeline offers an approver "Run again", which runs
// it once more as a new call recorded as theirs, with what they checked.
// A viewer is offered nothing.
func TestInbox_ACallWhoseOutcomeIsUnknownIsRunAgainByAnApprover(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, inboxPolicy, tokens)
	push := in.call(gitPush("inbox-rerun", "1"))
	require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+push.PendingID+"/decision", aliceToken, wire.DecideRequest{Approved: true}, nil))
	require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+push.PendingID+"/started", adminToken, wire.ReportRequest{LeaseMs: 1}, nil))
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the lost run ended unknown", func() (bool, any) {
		e, err := in.gate.Timer().AbandonLease(t.Context(), push.PendingID)
		if errors.Is(err, machine.ErrConflict) {
			return false, err // the lease has not run out yet
		}
		require.NoError(t, err)
		return e.OutcomeUnknown, e.Status
	})

	row := `li.row[data-id="` + push.PendingID + `"]`
	viewer := openPage(t, browser, in.url+"/#/calls/"+push.PendingID)
	viewer.signIn(viewerToken)
	viewer.do(chromedp.WaitVisible(chromedp.CSS(row + `.row-target .timeline`)))
	viewer.textOnce(row, "Result unknown", "lost its lease")
	viewer.until(`!document.querySelector('` + row + ` form.rerun')`)
	viewer.do(click(chromedp.ID("sign-out")))

	p := openPage(t, browser, in.url+"/#/calls/"+push.PendingID)
	p.signIn(aliceToken)
	p.do(chromedp.WaitVisible(chromedp.CSS(row + ` form.rerun`)))
	p.do(chromedp.SendKeys(chromedp.CSS(row+` form.rerun input`), "the remote has no release/2.8"),
		click(chromedp.CSS(row+` button[data-action="rerun"]`)))
	// The new call shows in the history (drawn again by its event).
	again := machine.PendingID("inbox-rerun", "1"+machine.RerunSuffix)
	p.textOnce(`li.row[data-id="`+again+`"]`, "run again")
	e := in.entry(again)
	assert.Equal(t, push.PendingID, e.RerunOf)
	assert.Equal(t, "alice", e.ApprovedOrRejectedByUserID)
	assert.Contains(t, e.StatusReason, "the remote has no release/2.8")
}

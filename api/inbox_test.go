package api_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/api"
	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// These tests drive the web inbox in a real headless Chromium against a
// real API over real embedded NATS: what an approver sees and clicks is
// what the entries end up saying.

var screenshot = flag.Bool("screenshot", false, "TestInbox_Screenshot writes docs/inbox.png")

const (
	aliceToken  = "alice-token-000000001"
	bobToken    = "bob-token-00000000001"
	viewerToken = "viewer-token-00000001"
	adminToken  = "admin-token-000000001"
)

// inboxPolicy asks about every call; its describe templates give the
// cards the one-line descriptions a real deployment would.
const inboxPolicy = `
default:
  requiresApprovalTools: all
  approvalTimeoutMs: 1800000
  describe:
    web_search: 'Search the web for "{{.query}}"'
    transfer_funds: 'Transfer {{.amount}} {{.currency}} to {{.to}}'
    Bash: 'Run {{.command}}'
`

// inboxServer is the API with a switch for an outage: while down, lists and
// the event stream answer 503, as from a proxy whose upstream is away,
// while decisions still go through.
type inboxServer struct {
	*harness
	srv  *httptest.Server
	down atomic.Bool
}

func startInbox(t *testing.T, policyDoc, tokenData string) *inboxServer {
	t.Helper()
	env := bustest.Start(t, bustest.Topologies[0])
	doc, err := policy.Parse([]byte(policyDoc))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	toks, err := api.ParseTokens([]byte(tokenData))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		_ = bus.NewRelay(env.JS, bus.RelayConfig{}, bustest.Logger()).Run(ctx)
	}()
	handler := api.New(api.Config{
		Machine: machine.New(env.Store, machine.WithEvaluator(engine)),
		JS:      env.JS, Calls: env.KV, Tokens: toks, Log: bustest.Logger(),
	})
	in := &inboxServer{}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.down.Load() && r.Method == "GET" && (r.URL.Path == "/v1/events" || r.URL.Path == "/v1/tool-calls") {
			http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	in.harness = &harness{t: t, url: in.srv.URL, env: env}
	t.Cleanup(func() { in.srv.CloseClientConnections(); in.srv.Close(); cancel(); <-relayDone })
	return in
}

// outage starts or ends an outage. Starting one also drops every open
// connection, so the page's event stream breaks as it would in one.
func (in *inboxServer) outage(on bool) {
	in.down.Store(on)
	if on {
		in.srv.CloseClientConnections()
	}
}

// call submits c as the admin, who may name any caller.
func (in *inboxServer) call(c machine.Call) machine.Entry {
	in.t.Helper()
	var e machine.Entry
	require.Equal(in.t, http.StatusCreated, in.do("POST", "/v1/tool-calls", adminToken, c, &e))
	require.Equal(in.t, machine.StatePendingApproval, e.Status, "the policy asks about %s", c.ToolName)
	return e
}

func (in *inboxServer) entry(id string) machine.Entry {
	in.t.Helper()
	var e machine.Entry
	require.Equal(in.t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+id, viewerToken, nil, &e))
	return e
}

func webSearch(conv, id, query string) machine.Call {
	return machine.Call{ToolCallID: id, ToolName: "web_search", ConversationID: conv, CallerBotID: "research-agent",
		Arguments: json.RawMessage(fmt.Sprintf(`{"query":%q}`, query)), Team: "research", EstimatedCost: 0.02}
}

func transfer(conv, id string) machine.Call {
	return machine.Call{ToolCallID: id, ToolName: "transfer_funds", ConversationID: conv, CallerBotID: "finance-agent",
		Arguments: json.RawMessage(`{"amount":2400,"currency":"EUR","to":"ACME GmbH","reference":"INV-1142"}`), Team: "finance", EstimatedCost: 2.4}
}

func gitPush(conv, id string) machine.Call {
	return machine.Call{ToolCallID: id, ToolName: "Bash", ConversationID: conv, CallerBotID: "release-bot",
		Arguments: json.RawMessage(`{"command":"git push origin release/2.8"}`), Team: "platform"}
}

// chromium finds the browser. Its absence fails the tests: a browser test
// that skips proves nothing. .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("chromium not found: the inbox tests drive a real browser. Install it (apt-get install -y chromium), as .ci/run does.")
	return ""
}

// startBrowser launches one headless Chromium for a test and its subtests;
// each page opens in a tab of its own.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	// Not t.TempDir: Chromium's helpers may still be writing the profile
	// when the test ends, and t.TempDir fails a test whose directory it
	// cannot remove.
	profile, err := os.MkdirTemp("", "toolgate-inbox-chromium-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(profile) })
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first Run starts the browser, and it lives as long as bctx:
	// no timeout here.
	require.NoError(t, chromedp.Do(bctx), "start chromium")
	return bctx
}

// page is one browser tab on the inbox.
type page struct {
	t   *testing.T
	ctx context.Context
}

func openPage(t *testing.T, browser context.Context, url string) *page {
	t.Helper()
	tab, cancelTab := chromedp.NewContext(browser)
	// The tab lives as long as the context of its first Run: open it
	// without a deadline, then bound every step with one.
	require.NoError(t, chromedp.Do(tab), "open a tab")
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	p := &page{t: t, ctx: ctx}
	// A strict CSP fails quietly: a refused inline style or script is only
	// a console message. So is an uncaught exception. Either fails the test.
	var mu sync.Mutex
	var problems []string
	require.NoError(t, chromedp.Listen(tab, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, fmt.Sprintf("uncaught: %s %s", ev.ExceptionDetails.Text, exceptionDescription(ev.ExceptionDetails)))
		case *log.EventEntryAdded:
			// Network errors are expected: a 401 before sign-in, a 503
			// in an outage.
			if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
				problems = append(problems, fmt.Sprintf("console %s: %s", ev.Entry.Source, ev.Entry.Text))
			}
		}
	}))
	t.Cleanup(func() {
		mu.Lock()
		assert.Empty(t, problems, "the page logged errors")
		mu.Unlock()
		if t.Failed() {
			// What the page showed when the test failed, to tell a broken
			// page from a broken test.
			dctx, dcancel := context.WithTimeout(tab, 5*time.Second)
			text, err := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText`))
			dcancel()
			t.Logf("the page when the test failed (err %v):\n%s", err, text)
		}
		cancel()
		cancelTab()
	})
	p.do(chromedp.Navigate(url))
	return p
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	require.NoError(p.t, chromedp.Do(p.ctx, steps...))
}

func (p *page) text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(p.t, err, "text of %s", sel)
	return s
}

// eval runs a script in the page and decodes its result.
func eval[T any](p *page, script string, opts ...chromedp.EvaluateOption) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](script, opts...))
	require.NoError(p.t, err, "evaluate %s", script)
	return v
}

// until waits for a JavaScript condition to hold.
func (p *page) until(cond string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(15*time.Second)))
	require.NoError(p.t, err, "waiting for %s", cond)
}

func (p *page) signIn(token string) {
	p.t.Helper()
	p.do(
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#sign-in-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
}

// setField replaces a field's text as typing would, firing input.
func (p *page) setField(sel, value string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%s); el.value = %s; el.dispatchEvent(new Event('input', {bubbles: true})); return true })()`,
		jsString(sel), jsString(value))
	eval[bool](p, js)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func card(id string) string { return `article.card[data-id="` + id + `"]` }

func button(id, action string) chromedp.CSS {
	return chromedp.CSS(card(id) + ` button[data-action="` + action + `"]`)
}

func cardCount(n int) string {
	return fmt.Sprintf(`document.querySelectorAll('article.card').length === %d`, n)
}

const live = `document.getElementById('conn').dataset.state === 'live'`

func TestInbox(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)

	t.Run("an approver decides from the page", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, tokens)
		search := in.call(webSearch("inbox", "c1", "NATS JetStream KV compare-and-set semantics"))
		pay := in.call(transfer("inbox", "c2"))
		push := in.call(gitPush("inbox", "c3"))

		p := openPage(t, browser, in.url)
		p.signIn(aliceToken)
		p.until(cardCount(3))
		p.until(live)
		got := p.text(card(pay.PendingID))
		for _, want := range []string{"transfer_funds", "Transfer 2400 EUR to ACME GmbH", "finance-agent", "inbox", "finance", "2.4", "requiresApprovalTools (default)", `"reference": "INV-1142"`} {
			assert.Contains(t, got, want)
		}
		assert.Regexp(t, `Auto-rejects in (29:[0-5]\d|30:00)`, got, "a live countdown to approvalTimeoutAt")
		assert.Equal(t, "3", p.text("#pending-count"))

		p.do(chromedp.Click(button(search.PendingID, "approve")), chromedp.WaitNotPresent(chromedp.CSS(card(search.PendingID))))
		p.do(
			chromedp.Click(button(pay.PendingID, "reject")),
			chromedp.SendKeys(chromedp.CSS(card(pay.PendingID)+` input.reason`), "Invoice 1142 was paid by card last week"),
			chromedp.Click(button(pay.PendingID, "confirm-reject")),
			chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))),
		)
		approved, rejected := in.entry(search.PendingID), in.entry(pay.PendingID)
		assert.Equal(t, machine.StateApproved, approved.Status)
		assert.Equal(t, "alice", approved.ApprovedOrRejectedByUserID)
		assert.Equal(t, machine.ScopeOnce, approved.DecisionScope)
		assert.Equal(t, machine.StateRejectedByUser, rejected.Status)
		assert.Equal(t, "alice", rejected.ApprovedOrRejectedByUserID)
		assert.Equal(t, "Invoice 1142 was paid by card last week", rejected.StatusReason)

		// Asked while the page is open: it appears without a reload.
		later := in.call(webSearch("inbox", "c4", "toolgate release notes"))
		p.do(chromedp.WaitVisible(chromedp.CSS(card(later.PendingID))))
		p.until(cardCount(2))

		// A reload lists again: the same two, still signed in.
		p.do(chromedp.Reload())
		p.until(cardCount(2))
		p.do(chromedp.WaitVisible(chromedp.CSS(card(push.PendingID))), chromedp.WaitVisible(chromedp.CSS(card(later.PendingID))))
		p.until(live)
		assert.Equal(t, "2", p.text("#pending-count"))

		// Approve with edits: invalid JSON is refused on the page.
		editor := card(push.PendingID) + ` textarea.edit-args`
		p.do(chromedp.Click(button(push.PendingID, "edit")), chromedp.WaitVisible(chromedp.CSS(editor)))
		p.setField(editor, `{"command": "git push origin release/2.8",`)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(push.PendingID) + ` .panel-edit .field-error`)))
		assert.Contains(t, p.text(card(push.PendingID)+` .panel-edit .field-error`), "Not valid JSON")
		assert.True(t, eval[bool](p, `document.querySelector('`+card(push.PendingID)+` button[data-action="confirm-edit"]').disabled`))
		p.setField(editor, `["git push"]`)
		assert.Contains(t, p.text(card(push.PendingID)+` .panel-edit .field-error`), "must be a JSON object")
		assert.Equal(t, machine.StatePendingApproval, in.entry(push.PendingID).Status, "nothing was sent")

		p.setField(editor, `{"command": "git push --dry-run origin release/2.8"}`)
		p.do(
			chromedp.WaitNotVisible(chromedp.CSS(card(push.PendingID)+` .panel-edit .field-error`)),
			chromedp.Click(button(push.PendingID, "confirm-edit")),
			chromedp.WaitNotPresent(chromedp.CSS(card(push.PendingID))),
		)
		edited := in.entry(push.PendingID)
		assert.Equal(t, machine.StateApproved, edited.Status)
		assert.Equal(t, "alice", edited.ApprovedOrRejectedByUserID)
		assert.JSONEq(t, `{"command":"git push --dry-run origin release/2.8"}`, string(edited.ToolArguments))
		assert.JSONEq(t, `{"command":"git push origin release/2.8"}`, string(edited.OriginalArguments))

		// The session scope, then the empty state.
		p.do(chromedp.Click(button(later.PendingID, "session")), chromedp.WaitNotPresent(chromedp.CSS(card(later.PendingID))))
		assert.Equal(t, machine.ScopeSession, in.entry(later.PendingID).DecisionScope)
		p.do(chromedp.WaitVisible(chromedp.ID("empty")))
		assert.Equal(t, "Nothing waiting for you", p.text("#empty-title"))

		// History: who, why and when, filtered by tool.
		row := func(id string) string { return `li.row[data-id="` + id + `"]` }
		p.do(chromedp.Click(chromedp.ID("tab-history")), chromedp.WaitVisible(chromedp.CSS(row(pay.PendingID))))
		p.until(`document.querySelectorAll('li.row').length === 4`)
		assert.Contains(t, p.text(row(pay.PendingID)), "Rejected")
		assert.Contains(t, p.text(row(pay.PendingID)), "alice")
		assert.Contains(t, p.text(row(pay.PendingID)), "Invoice 1142 was paid by card last week")
		assert.Contains(t, p.text(row(push.PendingID)), "edited")
		p.do(chromedp.SendKeys(chromedp.ID("f-tool"), "Bash"))
		p.until(`document.querySelectorAll('li.row').length === 1`)
		p.do(chromedp.Click(chromedp.CSS(row(push.PendingID)+` button[data-action="timeline"]`)),
			chromedp.WaitVisible(chromedp.CSS(row(push.PendingID)+` .timeline`)))
		timeline := p.text(row(push.PendingID) + ` .row-details`)
		assert.Contains(t, timeline, "approve")
		assert.Contains(t, timeline, "git push --dry-run")
		assert.Contains(t, timeline, "Asked with")
	})

	t.Run("a link from a notification opens a waiting call, ready but undecided", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, tokens)
		search := in.call(webSearch("links", "c1", "NATS KV watchers"))
		pay := in.call(transfer("links", "c2"))
		push := in.call(gitPush("links", "c3"))

		// Signed out when the link is followed: it opens after sign-in.
		p := openPage(t, browser, in.url+"/#/calls/"+pay.PendingID+"?decision=reject")
		p.signIn(aliceToken)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(pay.PendingID) + `.card-target input.reason`)))
		assert.True(t, eval[bool](p, `document.activeElement.matches('`+card(pay.PendingID)+` input.reason')`), "the reason has the focus")
		assert.Equal(t, 1, eval[int](p, `document.querySelectorAll('.card-target').length`))
		p.until(cardCount(3))

		// Another link while the page is open, its call hidden by a
		// filter: the filter goes, and Approve waits for a click.
		p.setField("#f-tool", "Bash")
		p.until(cardCount(1))
		eval[string](p, `location.hash = '#/calls/`+search.PendingID+`?decision=approve'`)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(search.PendingID) + `.card-target`)))
		p.until(`document.activeElement.matches('` + card(search.PendingID) + ` button[data-action="approve"]')`)
		p.until(cardCount(3))
		assert.Empty(t, eval[string](p, `document.getElementById('f-tool').value`))
		assert.Equal(t, 1, eval[int](p, `document.querySelectorAll('.card-target').length`), "only the call linked last is marked")
		for _, e := range []machine.Entry{search, pay, push} {
			assert.Equal(t, machine.StatePendingApproval, in.entry(e.PendingID).Status, "a link never decides")
		}

		// A link to a call this toolgate does not know says so.
		eval[string](p, `location.hash = '#/calls/links.no-such-call'`)
		p.do(chromedp.WaitVisible(chromedp.ID("link-note")))
		assert.Contains(t, p.text("#link-note"), "does not exist here")
		assert.Equal(t, 0, eval[int](p, `document.querySelectorAll('.card-target').length`))
	})

	t.Run("a link to a decided call shows it in the history", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, tokens)
		pay := in.call(transfer("linked", "c1"))
		other := in.call(webSearch("linked", "c2", "weather in Porto"))
		no, yes := false, true
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+pay.PendingID+"/decision", bobToken, api.DecisionRequest{Approved: &no, Reason: "Paid by card already"}, nil))
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+other.PendingID+"/decision", bobToken, api.DecisionRequest{Approved: &yes}, nil))

		// The Slack message's Approve button, followed after bob rejected.
		p := openPage(t, browser, in.url+"/#/calls/"+pay.PendingID+"?decision=approve")
		p.signIn(aliceToken)
		row := `li.row[data-id="` + pay.PendingID + `"]`
		p.do(chromedp.WaitVisible(chromedp.CSS(row + `.row-target .timeline`)))
		assert.Equal(t, "page", eval[string](p, `document.getElementById('tab-history').getAttribute('aria-current')`))
		timeline := p.text(row + ` .row-details`)
		for _, want := range []string{"ask", "reject", "bob", "Paid by card already", "Arguments"} {
			assert.Contains(t, timeline, want)
		}
		assert.Contains(t, p.text("#link-note"), "needs no decision any more: rejected by bob")
		p.until(`document.querySelectorAll('li.row').length === 2`)
		assert.Equal(t, machine.StateRejectedByUser, in.entry(pay.PendingID).Status)

		// The tabs still work, and leave the link behind.
		p.do(chromedp.Click(chromedp.ID("tab-inbox")), chromedp.WaitVisible(chromedp.ID("empty")))
		assert.Equal(t, "#inbox", eval[string](p, `location.hash`))
		assert.True(t, eval[bool](p, `document.getElementById('link-note').hidden`))
	})

	t.Run("a decision made elsewhere during an outage shows on the card", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, tokens)
		pay := in.call(transfer("outage", "c1"))
		p := openPage(t, browser, in.url)
		p.signIn(aliceToken)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(pay.PendingID))))
		p.until(live)

		in.outage(true)
		p.until(`document.getElementById('conn').dataset.state === 'reconnecting'`)
		yes := true
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+pay.PendingID+"/decision", bobToken, api.DecisionRequest{Approved: &yes, Reason: "paid"}, nil))
		missed := in.call(gitPush("outage", "c2"))

		// The page could not hear of bob's approval; its own is refused
		// and the card says by whom.
		p.do(chromedp.Click(button(pay.PendingID, "approve")), chromedp.WaitVisible(chromedp.CSS(card(pay.PendingID)+` .card-error`)))
		assert.Contains(t, p.text(card(pay.PendingID)+` .card-error`), "Already approved by bob.")
		assert.Equal(t, "bob", in.entry(pay.PendingID).ApprovedOrRejectedByUserID)

		// Back again: the page lists and follows anew, and shows what it missed.
		in.outage(false)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(missed.PendingID))))
		p.until(live)
		p.do(chromedp.Click(button(pay.PendingID, "dismiss")), chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
		p.until(cardCount(1))
	})

	t.Run("a viewer sees the calls and no buttons", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, tokens)
		pay := in.call(transfer("viewer", "c1"))
		p := openPage(t, browser, in.url)
		p.signIn(viewerToken)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(pay.PendingID))), chromedp.WaitVisible(chromedp.ID("viewer-notice")))
		assert.Equal(t, 0, eval[int](p, `document.querySelectorAll('article.card button').length`))
		assert.Contains(t, p.text("#who"), "vic")

		// The page's own credentials cannot decide either.
		status := eval[int](p, `fetch('v1/tool-calls/`+pay.PendingID+`/decision', {method: 'POST',
			headers: {'Content-Type': 'application/json', Authorization: 'Bearer ' + localStorage.getItem('toolgate.token')},
			body: JSON.stringify({approved: true})}).then(r => r.status)`, chromedp.EvalAwaitPromise)
		assert.Equal(t, http.StatusForbidden, status)
		assert.Equal(t, machine.StatePendingApproval, in.entry(pay.PendingID).Status)
	})

	t.Run("a wrong token is refused and sign-out forgets it", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, tokens)
		p := openPage(t, browser, in.url)
		p.do(
			chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), "not-a-token-at-all-0001"),
			chromedp.Click(chromedp.CSS(`#sign-in-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.ID("sign-in-error")),
		)
		assert.Equal(t, "That token was not accepted.", p.text("#sign-in-error"))
		p.signIn(aliceToken)
		p.do(chromedp.WaitVisible(chromedp.ID("empty")))
		p.do(chromedp.Click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
		assert.Empty(t, eval[string](p, `localStorage.getItem('toolgate.token') || ''`))
	})

	t.Run("open mode asks for a name and decides as it", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, "")
		search := in.call(webSearch("open", "c1", "weather in Lisbon"))
		p := openPage(t, browser, in.url)
		p.do(
			chromedp.WaitVisible(chromedp.ID("user-name")),
			chromedp.SendKeys(chromedp.ID("user-name"), "dana"),
			chromedp.Click(chromedp.CSS(`#name-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(card(search.PendingID))),
		)
		assert.Contains(t, p.text("#who"), "dana")
		p.do(chromedp.Click(button(search.PendingID, "always")), chromedp.WaitNotPresent(chromedp.CSS(card(search.PendingID))))
		e := in.entry(search.PendingID)
		assert.Equal(t, "dana", e.ApprovedOrRejectedByUserID)
		assert.Equal(t, machine.ScopeAlways, e.DecisionScope)
	})
}

// screenshotPolicy is a small realistic deployment: payments and emails
// always ask, pushes ask by rule, anything costly asks, and a release
// conversation has a short fuse.
const screenshotPolicy = `
default:
  requiresApprovalTools: [transfer_funds, send_email]
  approvalTimeoutMs: 1800000
  requireApprovalAboveCost: 0.5
  rules:
    ask: ["Bash(git push:*)"]
  describe:
    web_search: 'Search the web for "{{.query}}"'
    transfer_funds: 'Transfer {{.amount}} {{.currency}} to {{.to}}'
    Bash: 'Run {{.command}}'
teams:
  finance:
    approvalTimeoutMs: 600000
    autoRejectOnTimeout: true
conversations:
  release-2.8:
    approvalTimeoutMs: 240000
`

// TestInbox_Screenshot renders the inbox with a few realistic calls, and
// with -screenshot writes it to docs/inbox.png for the README.
func TestInbox_Screenshot(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, screenshotPolicy, tokens)
	calls := []machine.Call{
		gitPush("release-2.8", "call_7f3a"),
		transfer("q3-close", "call_21c9"),
		{ToolCallID: "call_0b44", ToolName: "web_search", ConversationID: "market-scan", CallerBotID: "research-agent", Team: "research", EstimatedCost: 1.2,
			Arguments: json.RawMessage(`{"query":"EU AI Act obligations for general-purpose models","max_results":20,"recency_days":90}`)},
	}
	for _, c := range calls {
		in.call(c)
	}
	p := openPage(t, browser, in.url)
	p.do(chromedp.EmulateViewport(1200, 1000, chromedp.EmulateScale(2)))
	p.signIn(aliceToken)
	p.until(cardCount(3))
	p.until(live)
	text := p.text("#cards")
	for _, want := range []string{`Search the web for "EU AI Act`, "requireApprovalAboveCost", `rules.ask "Bash(git push:*)"`, "Auto-rejects in", "Transfer 2400 EUR to ACME GmbH"} {
		assert.Contains(t, text, want)
	}
	if !*screenshot {
		return
	}
	// Let the arrival highlight finish so the picture is at rest.
	p.until(`document.getAnimations().length === 0`)
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	out := filepath.Join("..", "docs", "inbox.png")
	require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
	require.NoError(t, os.WriteFile(out, png, 0o644))
	t.Logf("wrote %s (%d KB)", out, len(png)/1024)
}

func exceptionDescription(d *runtime.ExceptionDetails) string {
	if d.Exception != nil {
		return d.Exception.Description
	}
	return ""
}

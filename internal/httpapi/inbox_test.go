package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
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
	gate *gate.Service
	tg   *toolgatetest.Gate
	down atomic.Bool
}

// inboxOptions vary the server of a test.
type inboxOptions struct {
	// now is the machine's clock (default time.Now): a scripted history
	// of calls happens at the times it says.
	now func() time.Time
	// analytics runs the analytics role, which keeps what GET
	// /v1/analytics serves; without, the API serves empty aggregates.
	analytics bool
	// noAnalytics serves the API as a toolgate without analytics would,
	// answering GET /v1/analytics with 404. toolgate's http role always
	// serves them; the page must still cope with an API that does not.
	noAnalytics bool
	// tools are built-in tools a serve role hosts (--tools), as a
	// toolgate running its executor role does.
	tools []string
	// oidc signs people in at an OpenID provider (--oidc-…).
	oidc *httpapi.OIDC
}

func startInbox(t *testing.T, policyDoc, tokenData string) *inboxServer {
	t.Helper()
	return startInboxWith(t, policyDoc, tokenData, inboxOptions{})
}

func startInboxWith(t *testing.T, policyDoc, tokenData string, opts inboxOptions) *inboxServer {
	t.Helper()
	roles := []string{"relay", "http"}
	if opts.analytics {
		roles = append(roles, "analytics")
	}
	if len(opts.tools) > 0 {
		roles = append(roles, "intake", "executor")
	}
	configure := func(c *server.Config) {
		c.Tools = opts.tools
		if opts.oidc != nil {
			c.OIDC = *opts.oidc
		}
	}
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: roles, Policy: policyDoc, Tokens: tokenData, Clock: opts.now, Configure: configure})
	// toolgate's API behind a server of the test's own, which can fail
	// as a proxy would and drop every connection at once.
	handler := g.Main.HTTPHandler()
	in := &inboxServer{gate: g.Service, tg: g}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.down.Load() && r.Method == "GET" && (r.URL.Path == "/v1/events" || r.URL.Path == "/v1/tool-calls") {
			http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
			return
		}
		if opts.noAnalytics && r.URL.Path == "/v1/analytics" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(httpapi.ErrorBody{Error: wire.ErrorDetail{Code: "not_found", Message: "this toolgate reports no analytics"}})
			return
		}
		handler.ServeHTTP(w, r)
	}))
	in.harness = &harness{t: t, url: in.srv.URL}
	t.Cleanup(func() {
		in.srv.CloseClientConnections()
		in.srv.Close()
	})
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

// chrome is the package's one headless Chromium, started by the first
// test that asks for it and stopped by TestMain: each page opens in a tab
// of its own (a browser a test cost seconds of CPU to start).
var chrome struct {
	once sync.Once
	ctx  context.Context
	stop func()
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if chrome.stop != nil {
		chrome.stop()
	}
	os.Exit(code)
}

// startBrowser returns the package's browser, starting it the first time.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	chrome.once.Do(func() { chrome.ctx, chrome.stop, chrome.err = launchBrowser(path) })
	require.NoError(t, chrome.err, "start chromium")
	return chrome.ctx
}

// launchBrowser starts Chromium at path. One that fails to start on a
// loaded machine (two suites at once start several) is started again,
// twice at most.
func launchBrowser(path string) (context.Context, func(), error) {
	// Not a test's TempDir: Chromium's helpers may still be writing the
	// profile when it stops.
	profile, err := os.MkdirTemp("", "toolgate-inbox-chromium-")
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for range 3 {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
			chromedp.ExecPath(path),
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
			chromedp.WSURLReadTimeout(time.Minute),
		)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		// The first Run starts the browser, and it lives as long as
		// bctx: no timeout here.
		if err := chromedp.Do(bctx); err != nil {
			cancelBrowser()
			cancelAlloc()
			errs = append(errs, err)
			continue
		}
		return bctx, func() { cancelBrowser(); cancelAlloc(); _ = os.RemoveAll(profile) }, nil
	}
	_ = os.RemoveAll(profile)
	return nil, nil, errors.Join(errs...)
}

// page is one browser tab on the inbox.
type page struct {
	t   *testing.T
	ctx context.Context
}

func openPage(t *testing.T, browser context.Context, url string, opts ...chromedp.ContextOption) *page {
	t.Helper()
	tab, cancelTab := chromedp.NewContext(browser, opts...)
	// The tab lives as long as the context of its first Run: open it
	// without a deadline, then bound what the test does on it with one,
	// long enough for a whole subtest under -race on a loaded machine
	// (each wait has its own, shorter bound).
	require.NoError(t, chromedp.Do(tab), "open a tab")
	ctx, cancel := context.WithTimeout(tab, 90*time.Second)
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

// text waits for the element sel names and returns its visible text
// (innerText) in one read: a query for the node and a second call to read
// it fail with "No node with given id found" when the page draws the
// element again between them.
func (p *page) text(sel string) string {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%s); return el ? [el.innerText] : null })()`, jsString(sel))
	got, err := chromedp.Run(p.ctx, chromedp.Poll[[]string](js, pollFor(15*time.Second)...))
	require.NoError(p.t, err, "text of %s", sel)
	return got[0]
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
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](cond, pollFor(15*time.Second)...))
	require.NoError(p.t, err, "waiting for %s", cond)
}

func (p *page) signIn(token string) {
	p.t.Helper()
	p.do(
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		click(chromedp.CSS(`#sign-in-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
}

// pollFor polls a page's script for up to d, every 20 ms: chromedp's
// default runs it on every animation frame, which keeps the browser
// drawing frames (and a core busy) for as long as a test waits.
func pollFor(d time.Duration) []chromedp.PollOption {
	return []chromedp.PollOption{chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(20 * time.Millisecond)}
}

// click is chromedp.Click, asked again when the page drew the element
// anew between the query that found it and the click ("No node with given
// id", "Could not find node with given id"): the click never reached the
// page then.
func click[S chromedp.Selectable](sel S) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for {
			_, err := chromedp.Click(sel)(ctx, t)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "node with given id") {
				return chromedp.Void{}, err
			}
		}
	}
}

// textOnce waits until the element sel names holds every one of wants,
// and returns its text as it was then: one read, however often the page
// draws it again meanwhile. A failed wait says what the element held.
func (p *page) textOnce(sel string, wants ...string) string {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%s); const t = el ? el.textContent : ''; return %s.every((w) => t.includes(w)) ? t : '' })()`,
		jsString(sel), jsStrings(wants))
	got, err := chromedp.Run(p.ctx, chromedp.Poll[string](js, pollFor(15*time.Second)...))
	if err != nil {
		// p.ctx may be what ran out: look with a moment of its own.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
		last, _ := chromedp.Run(lctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {}).textContent || '(not there)'`, jsString(sel))))
		cancel()
		require.NoError(p.t, err, "waiting for %s to hold %q; it held %q", sel, wants, last)
	}
	return got
}

func jsStrings(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
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

// grantFrom approves the call id for scope (session or always) from its
// card's grant panel, as it opens: the pattern the call gives, for the
// first life offered.
func (p *page) grantFrom(id, scope string) {
	p.do(click(button(id, scope)), chromedp.WaitVisible(chromedp.CSS(card(id)+` .panel-grant`)),
		click(button(id, "confirm-grant")), chromedp.WaitNotPresent(chromedp.CSS(card(id))))
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

		p.do(click(button(search.PendingID, "approve")), chromedp.WaitNotPresent(chromedp.CSS(card(search.PendingID))))
		p.do(
			click(button(pay.PendingID, "reject")),
			chromedp.SendKeys(chromedp.CSS(card(pay.PendingID)+` input.reason`), "Invoice 1142 was paid by card last week"),
			click(button(pay.PendingID, "confirm-reject")),
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
		p.do(click(button(push.PendingID, "edit")), chromedp.WaitVisible(chromedp.CSS(editor)))
		p.setField(editor, `{"command": "git push origin release/2.8",`)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(push.PendingID) + ` .panel-edit .field-error`)))
		assert.Contains(t, p.text(card(push.PendingID)+` .panel-edit .field-error`), "Not valid JSON")
		assert.True(t, eval[bool](p, `document.querySelector('`+card(push.PendingID)+` button[data-action="confirm-edit"]').disabled`))
		p.setField(editor, `["git push"]`)
		assert.Contains(t, p.text(card(push.PendingID)+` .panel-edit .field-error`), "must be a JSON object")
		assert.Equal(t, machine.StatePendingApproval, in.entry(push.PendingID).Status, "nothing was sent")

		p.setField(editor, `{"command": "git push --dry-run origin release/2.8"}`)
		// Before approving, what the edit changes against what was asked.
		assert.Equal(t, "-   \"command\": \"git push origin release/2.8\"\n+   \"command\": \"git push --dry-run origin release/2.8\"",
			strings.TrimSpace(p.text(card(push.PendingID)+` .panel-edit .edit-diff`)))
		p.do(
			chromedp.WaitNotVisible(chromedp.CSS(card(push.PendingID)+` .panel-edit .field-error`)),
			click(button(push.PendingID, "confirm-edit")),
			chromedp.WaitNotPresent(chromedp.CSS(card(push.PendingID))),
		)
		edited := in.entry(push.PendingID)
		assert.Equal(t, machine.StateApproved, edited.Status)
		assert.Equal(t, "alice", edited.ApprovedOrRejectedByUserID)
		assert.JSONEq(t, `{"command":"git push --dry-run origin release/2.8"}`, string(edited.ToolArguments))
		assert.JSONEq(t, `{"command":"git push origin release/2.8"}`, string(edited.OriginalArguments))

		// The session scope, then the empty state.
		p.until(`document.querySelector('` + card(later.PendingID) + ` .grant-hint').dataset.state === 'ready'`)
		p.grantFrom(later.PendingID, "session")
		assert.Equal(t, machine.ScopeSession, in.entry(later.PendingID).DecisionScope)
		p.do(chromedp.WaitVisible(chromedp.ID("empty")))
		assert.Equal(t, "Nothing waiting for you", p.text("#empty-title"))
		assert.Contains(t, p.text("#empty-try"), "toolgate submit --tool Bash", "the empty inbox says how a first call arrives")

		// History: who, why and when, filtered by tool.
		row := func(id string) string { return `li.row[data-id="` + id + `"]` }
		p.do(click(chromedp.ID("tab-history")), chromedp.WaitVisible(chromedp.CSS(row(pay.PendingID))))
		p.until(`document.querySelectorAll('li.row').length === 4`)
		assert.Contains(t, p.text(row(pay.PendingID)), "Rejected")
		assert.Contains(t, p.text(row(pay.PendingID)), "alice")
		assert.Contains(t, p.text(row(pay.PendingID)), "Invoice 1142 was paid by card last week")
		assert.Contains(t, p.text(row(push.PendingID)), "edited")
		p.do(chromedp.SendKeys(chromedp.ID("f-tool"), "Bash"))
		p.until(`document.querySelectorAll('li.row').length === 1`)
		p.do(click(chromedp.CSS(row(push.PendingID)+` button[data-action="timeline"]`)),
			chromedp.WaitVisible(chromedp.CSS(row(push.PendingID)+` .timeline`)))
		// The timeline loads after it opens: wait for its content, not
		// its "Loading…".
		// A late event may draw the history again (and load the timeline
		// again): read the timeline once it holds what it should.
		timeline := p.textOnce(row(push.PendingID)+` .row-details`, "Asked with", "git push --dry-run", "Approved by alice")
		assert.Contains(t, timeline, "Asked by release-bot; waits for a person")
		assert.NotContains(t, timeline, "APPROVED_READY_FOR_EXECUTION", "in words, not state names")
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
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+pay.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: false, Reason: "Paid by card already"}, nil))
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+other.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: true}, nil))

		// The Slack message's Approve button, followed after bob rejected.
		p := openPage(t, browser, in.url+"/#/calls/"+pay.PendingID+"?decision=approve")
		p.signIn(aliceToken)
		row := `li.row[data-id="` + pay.PendingID + `"]`
		p.do(chromedp.WaitVisible(chromedp.CSS(row + `.row-target .timeline`)))
		assert.Equal(t, "page", eval[string](p, `document.getElementById('tab-history').getAttribute('aria-current')`))
		p.until(`(document.querySelector('` + row + ` .row-details') || {}).textContent?.includes('Paid by card already') === true`)
		timeline := p.text(row + ` .row-details`)
		// In words: who asked and why a person decides, who decided.
		for _, want := range []string{"Asked by finance-agent; waits for a person", "requiresApprovalTools (default)", "Rejected by bob", "Paid by card already", "Arguments"} {
			assert.Contains(t, timeline, want)
		}
		assert.Contains(t, p.text("#link-note"), "needs no decision any more: rejected by bob")
		p.until(`document.querySelectorAll('li.row').length === 2`)
		assert.Equal(t, machine.StateRejectedByUser, in.entry(pay.PendingID).Status)

		// The tabs still work, and leave the link behind.
		p.do(click(chromedp.ID("tab-inbox")), chromedp.WaitVisible(chromedp.ID("empty")))
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
		require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+pay.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: true, Reason: "paid"}, nil))
		missed := in.call(gitPush("outage", "c2"))

		// The page could not hear of bob's approval; its own is refused
		// and the card says by whom.
		p.do(click(button(pay.PendingID, "approve")), chromedp.WaitVisible(chromedp.CSS(card(pay.PendingID)+` .card-error`)))
		assert.Contains(t, p.text(card(pay.PendingID)+` .card-error`), "Already approved by bob.")
		assert.Equal(t, "bob", in.entry(pay.PendingID).ApprovedOrRejectedByUserID)

		// Back again: the page lists and follows anew, and shows what it missed.
		in.outage(false)
		p.do(chromedp.WaitVisible(chromedp.CSS(card(missed.PendingID))))
		p.until(live)
		p.do(click(button(pay.PendingID, "dismiss")), chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
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
			click(chromedp.CSS(`#sign-in-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.ID("sign-in-error")),
		)
		assert.Equal(t, "That token was not accepted.", p.text("#sign-in-error"))
		p.signIn(aliceToken)
		p.do(chromedp.WaitVisible(chromedp.ID("empty")))
		p.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
		assert.Empty(t, eval[string](p, `localStorage.getItem('toolgate.token') || ''`))
	})

	t.Run("open mode asks for a name and decides as it", func(t *testing.T) {
		in := startInbox(t, inboxPolicy, "")
		search := in.call(webSearch("open", "c1", "weather in Lisbon"))
		p := openPage(t, browser, in.url)
		// An empty name is asked for, saying what it is for.
		p.do(chromedp.WaitVisible(chromedp.ID("user-name")), click(chromedp.CSS(`#name-form button[type=submit]`)), chromedp.WaitVisible(chromedp.ID("name-error")))
		assert.Contains(t, p.text("#name-error"), "Give your name: every decision you make is recorded under it")
		p.do(
			chromedp.SendKeys(chromedp.ID("user-name"), "dana"),
			click(chromedp.CSS(`#name-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(card(search.PendingID))),
		)
		assert.Contains(t, p.text("#who"), "dana")
		p.until(`document.querySelector('` + card(search.PendingID) + ` .grant-hint').dataset.state === 'ready'`)
		p.grantFrom(search.PendingID, "always")
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
// with -screenshot writes it to docs/inbox.png for docs/inbox.md.
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
	out := filepath.Join("..", "..", "docs", "inbox.png")
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

// analyticsPolicy asks about every call, and rejects the platform team's
// when nobody answers in ten minutes.
const analyticsPolicy = inboxPolicy + `teams:
  platform:
    approvalTimeoutMs: 600000
    autoRejectOnTimeout: true
`

// analyticsScript is a small history over three past hours, small enough
// to know its numbers: web_search approved every time (an allow rule is
// due), transfer_funds mostly rejected, Bash twice timed out in three.
func analyticsScript(hour time.Time) []scripted {
	hours := []time.Time{hour.Add(-3 * time.Hour), hour.Add(-2 * time.Hour), hour.Add(-time.Hour)}
	var plan []scripted
	for i := range 12 {
		plan = append(plan, scripted{
			call: webSearch("analytics", fmt.Sprintf("ws-%d", i), fmt.Sprintf("query %d", i)),
			at:   hours[i%3].Add(5*time.Minute + time.Duration(i)*2*time.Minute),
			// 60s, 70s, … 170s: the median (6th) is 110s, the p90 (11th) 160s.
			after:   time.Minute + time.Duration(i)*10*time.Second,
			outcome: outcomeApprove, by: []string{"alice", "bob"}[i%2], cost: 0.03,
		})
	}
	for i := range 6 {
		s := scripted{call: transfer("analytics", fmt.Sprintf("tf-%d", i)), at: hours[i%3].Add(35*time.Minute + time.Duration(i)*2*time.Minute), after: 4 * time.Minute}
		switch {
		case i < 2:
			s.outcome, s.by = outcomeApprove, "carol"
		case i < 5:
			s.outcome, s.by, s.reason = outcomeReject, "bob", "Invoice already paid"
		default:
			s.outcome, s.by, s.reason = outcomeReject, "bob", "Wrong account"
		}
		plan = append(plan, s)
	}
	for i := range 3 {
		s := scripted{call: gitPush("analytics", fmt.Sprintf("gp-%d", i)), at: hours[i].Add(42 * time.Minute)}
		if i == 0 {
			s.outcome, s.by, s.after = outcomeApprove, "alice", time.Minute
		} else {
			s.outcome, s.after = outcomeTimeout, 10*time.Minute+time.Second
		}
		plan = append(plan, s)
	}
	return plan
}

// intervalsWith counts the distinct intervals of length d, from since on,
// in which a call of the plan ended with one of the outcomes.
func intervalsWith(plan []scripted, d time.Duration, since time.Time, outcomes ...string) int {
	seen := map[time.Time]bool{}
	for _, s := range plan {
		if slices.Contains(outcomes, s.outcome) && !s.decidedAt().Before(since) {
			seen[s.decidedAt().Truncate(d)] = true
		}
	}
	return len(seen)
}

func TestInbox_Analytics(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)

	t.Run("a scripted history's numbers, charts and recommendations", func(t *testing.T) {
		// The history is placed in the hours before this one, and the
		// charts' windows end with the hour the page is shown in: when the
		// hour turns before the page is ready, play it again in the new one.
		var (
			clk  *toolgatetest.Clock
			in   *inboxServer
			plan []scripted
			hour time.Time
			p    *page
		)
		for {
			clk = new(toolgatetest.Clock)
			in = startInboxWith(t, analyticsPolicy, tokens, inboxOptions{now: clk.Now, analytics: true})
			// A shadow policy the same as the one in force: every call
			// compared, none decided otherwise.
			require.Equal(t, http.StatusOK, in.do("POST", "/v1/policy/shadow", adminToken, wire.PolicyDocument{Document: analyticsPolicy}, nil))
			hour = time.Now().Truncate(time.Hour)
			plan = analyticsScript(hour)
			in.play(clk, plan)
			in.analytics(func(r *wire.AnalyticsReport) bool {
				return r.Totals.Decided == int64(len(plan)) && r.Totals.Succeeded == 12
			})
			bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the shadow's report counts every call", func() (bool, any) {
				var r wire.PolicyShadowReport
				in.do("GET", "/v1/policy/shadow/report", viewerToken, nil, &r)
				return r.Calls == len(plan), r.Calls
			})

			// A viewer sees the analytics too.
			p = openPage(t, browser, in.url+"/#analytics")
			p.signIn(viewerToken)
			p.until(`document.getElementById('analytics').dataset.state === 'ready'`)
			if time.Now().Truncate(time.Hour).Equal(hour) {
				break
			}
			t.Logf("the hour turned while the history was played (%s): again, in the new hour", hour.Format(time.Kitchen))
		}
		assert.Equal(t, "page", eval[string](p, `document.getElementById('tab-analytics').getAttribute('aria-current')`))
		assert.True(t, eval[bool](p, `document.getElementById('filters').hidden`), "the inbox's filters are not the analytics'")
		// Every table fits the page, nothing cut off or scrolled sideways.
		assert.Equal(t, []string{}, eval[[]string](p, `[...document.querySelectorAll('#analytics .table-wrap')].filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.querySelector('caption, table')?.textContent.slice(0, 40) + ': ' + w.scrollWidth + ' > ' + w.clientWidth)`))

		cell := func(table, name, col string) string {
			return fmt.Sprintf(`#an-%s tr[data-name="%s"] [data-col="%s"]`, table, name, col)
		}
		raw := func(sel string) float64 {
			return eval[float64](p, `Number(document.querySelector('`+sel+`').dataset.raw)`)
		}
		assert.Equal(t, "21", p.text(`[data-kpi="calls"] .kpi-value`))
		assert.Regexp(t, `^Revision \d+ \(set now\): 21 calls compared, 0 would be decided otherwise\.`, p.text(`#an-shadow-sub`))
		assert.Equal(t, "21", p.text(`#an-shadow-verdicts tr[data-name="ask (unchanged)"] [data-col="calls"]`))
		assert.Equal(t, "12", p.text(cell("tools", "web_search", "calls")))
		assert.Equal(t, "100%", p.text(cell("tools", "web_search", "approvalRate")))
		assert.Equal(t, "0%", p.text(cell("tools", "web_search", "timeoutRate")))
		assert.Equal(t, "0.36", p.text(cell("tools", "web_search", "cost")))
		assert.Equal(t, "0.24", p.text(cell("tools", "web_search", "estimatedCost")))
		assert.Contains(t, p.text(`[data-kpi="cost"]`), "estimated for every call asked, run or not", "says what each cost counts")
		// The analytics keep a histogram, within 4.5% of the true quantiles.
		assert.InEpsilon(t, 110_000, raw(cell("tools", "web_search", "p50")), 0.05)
		assert.InEpsilon(t, 160_000, raw(cell("tools", "web_search", "p90")), 0.05)
		assert.Regexp(t, `^1m \d\ds$`, p.text(cell("tools", "web_search", "p50")))
		assert.Regexp(t, `^2m \d\ds|1m 5\ds$`, p.text(cell("tools", "web_search", "p90")))
		assert.Equal(t, "33%", p.text(cell("tools", "transfer_funds", "approvalRate")))
		assert.Equal(t, "4", p.text(cell("tools", "transfer_funds", "rejected")))
		assert.Equal(t, "67%", p.text(cell("tools", "Bash", "timeoutRate")))
		assert.Equal(t, "6", p.text(cell("teams", "finance", "calls")))
		assert.Equal(t, "10", p.text(cell("approvers", "bob", "decisions")))
		assert.Equal(t, "7", p.text(cell("approvers", "alice", "decisions")))
		assert.Equal(t, "2", p.text(cell("approvers", "carol", "decisions")))
		top := p.text(`#an-reasons .reason:first-child`)
		for _, want := range []string{"Invoice already paid", "3", "transfer_funds"} {
			assert.Contains(t, top, want)
		}

		// The decisions per hour: a column for each of the 24, a bar in
		// those with decisions, its parts adding up to the history.
		count := func(sel string) int { return eval[int](p, `document.querySelectorAll('`+sel+`').length`) }
		sum := func(sel string) int {
			return eval[int](p, `[...document.querySelectorAll('`+sel+`')].reduce((n, el) => n + Number(el.dataset.count), 0)`)
		}
		since := hour.Add(-23 * time.Hour)
		assert.Equal(t, 24, count(`#chart-decisions-plot g.col`))
		assert.Equal(t, intervalsWith(plan, time.Hour, since, outcomeApprove, outcomeReject, outcomeTimeout),
			count(`#chart-decisions-plot g.col:not([data-decisions="0"])`))
		assert.Equal(t, 15, sum(`#chart-decisions-plot rect.seg-approved`))
		assert.Equal(t, 4, sum(`#chart-decisions-plot rect.seg-rejected`))
		assert.Equal(t, 2, sum(`#chart-decisions-plot rect.seg-timedout`))
		assert.Equal(t, intervalsWith(plan, time.Hour, since, outcomeApprove, outcomeReject), count(`#chart-response-plot circle.dot-p50`))
		assert.Equal(t, count(`#chart-response-plot circle.dot-p50`), count(`#chart-response-plot circle.dot-p90`))
		assert.Contains(t, eval[string](p, `document.querySelector('#chart-decisions-plot g.col:not([data-decisions="0"]) title').textContent`), "approved")
		assert.Greater(t, count(`#chart-decisions-plot text.tick`), 6, "labelled axes")

		// Per minute: the last two to three hours, a column a minute.
		p.do(click(chromedp.ID("res-minute")))
		p.until(`document.getElementById('analytics').dataset.resolution === 'minute'`)
		cols := count(`#chart-decisions-plot g.col`)
		assert.GreaterOrEqual(t, cols, 120)
		assert.LessOrEqual(t, cols, 180)
		minuteSince := hour.Add(-2 * time.Hour)
		assert.Equal(t, intervalsWith(plan, time.Minute, minuteSince, outcomeApprove, outcomeReject, outcomeTimeout),
			count(`#chart-decisions-plot g.col:not([data-decisions="0"])`))
		assert.Equal(t, intervalsWith(plan, time.Minute, minuteSince, outcomeApprove, outcomeReject), count(`#chart-response-plot circle.dot-mean`))

		// The recommendations, with their evidence and the rule to paste.
		allow := `article.rec[data-kind="allow_rule"][data-tool="web_search"]`
		assert.Contains(t, p.text(allow+` .rec-summary`), "approved in all 12 of 12 decisions")
		assert.Contains(t, p.text(allow+` .rec-head`), "teams.research")
		assert.Contains(t, p.text(allow+` .facts`), "100%")
		assert.Equal(t, "web_search", p.text(allow+` .snippet-rule pre`))
		policyText := p.text(allow + ` .snippet-policy pre`)
		assert.Contains(t, policyText, "research:")
		assert.Contains(t, policyText, "- web_search")
		review := `article.rec[data-kind="review_rejections"][data-tool="transfer_funds"]`
		assert.Contains(t, p.text(review), "Invoice already paid")
		assert.Equal(t, 2, count(`article.rec`), "Bash has too few calls for a recommendation")

		// Copy puts the rule on the clipboard.
		for _, perm := range []string{"clipboard-read", "clipboard-write"} {
			_, err := chromedp.CallBrowser(p.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
				Permission: &cdpbrowser.PermissionDescriptor{Name: perm}, Setting: cdpbrowser.PermissionSettingGranted, Origin: in.url})
			require.NoError(t, err)
		}
		_, err := chromedp.Call(p.ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true})
		require.NoError(t, err)
		p.do(click(chromedp.CSS(allow + ` .snippet-rule button[data-action="copy"]`)))
		p.until(`document.querySelector('` + allow + ` .snippet-rule button[data-action="copy"]').textContent === 'Copied'`)
		assert.Equal(t, "web_search", eval[string](p, `navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))

		// A call decided while the page is open counts without a reload.
		clk.Set(time.Now())
		in.play(clk, []scripted{{call: webSearch("analytics", "ws-live", "live"), at: time.Now(), after: 5 * time.Second, outcome: outcomeApprove, by: "alice"}})
		p.until(`document.querySelector('` + cell("tools", "web_search", "calls") + `').textContent === '13'`)
	})

	t.Run("no data yet, and a process without analytics", func(t *testing.T) {
		in := startInboxWith(t, inboxPolicy, tokens, inboxOptions{analytics: true})
		p := openPage(t, browser, in.url)
		p.signIn(aliceToken)
		p.do(click(chromedp.ID("tab-analytics")), chromedp.WaitVisible(chromedp.ID("an-empty")))
		assert.Equal(t, "empty", eval[string](p, `document.getElementById('analytics').dataset.state`))
		assert.Equal(t, "#analytics", eval[string](p, `location.hash`))

		off := startInboxWith(t, inboxPolicy, tokens, inboxOptions{noAnalytics: true})
		q := openPage(t, browser, off.url)
		q.signIn(viewerToken)
		q.do(click(chromedp.ID("tab-analytics")), chromedp.WaitVisible(chromedp.ID("an-off")))
		assert.Contains(t, q.text("#an-off"), "Analytics are not served here")
		assert.True(t, eval[bool](q, `document.getElementById('an-body').hidden`))
	})
}

// screenshotAnalyticsPolicy gives the finance and support teams short
// fuses, so that some of their calls time out.
const screenshotAnalyticsPolicy = inboxPolicy + `teams:
  finance:
    approvalTimeoutMs: 900000
    autoRejectOnTimeout: true
  support:
    approvalTimeoutMs: 300000
    autoRejectOnTimeout: true
`

// busyDay is a day of a small team's calls, made up but shaped like one:
// searches approved every time, payments mostly refused, emails often
// left to time out, pushes mostly let through. It ends before end.
func busyDay(end time.Time) []scripted {
	rng := rand.New(rand.NewPCG(2024, 11))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	// What becomes of a tool's calls, in turn: Approved, Rejected, Timed out.
	patterns := map[string]string{
		"web_search":     "A",
		"transfer_funds": "RARRTRRARRRT",
		"send_email":     "ATATRAATTA",
		"Bash":           "AAAARAAAAAAA",
	}
	turns := map[string]int{}
	start := end.Add(-24 * time.Hour)
	var plan []scripted
	for at, n := start, 1; ; n++ {
		// Busier in the day's middle than at its ends.
		x := float64(at.Sub(start)) / float64(24*time.Hour)
		at = at.Add(between(5*time.Minute, time.Duration(float64(40*time.Minute)*(1.2-math.Sin(math.Pi*x)))))
		id := fmt.Sprintf("call_%03d", n)
		var s scripted
		switch r := rng.IntN(100); {
		case r < 42:
			s = scripted{call: webSearch("market-scan", id, pick("EU AI Act obligations", "NATS JetStream KV semantics", "competitor pricing 2025")),
				after: between(15*time.Second, 4*time.Minute), by: pick("alice", "bob", "carol"), cost: 0.01 + 0.04*rng.Float64()}
		case r < 60:
			s = scripted{call: transfer("q3-close", id), after: between(2*time.Minute, 12*time.Minute), by: pick("bob", "carol"), cost: 0.4,
				reason: pick("Invoice already paid", "Invoice already paid", "Invoice already paid", "Wrong beneficiary account", "Over the monthly limit", "")}
		case r < 80:
			s = scripted{call: machine.Call{ToolCallID: id, ToolName: "send_email", ConversationID: "support-inbox", CallerBotID: "support-agent", Team: "support", EstimatedCost: 0.01,
				Arguments: json.RawMessage(`{"to":"customer@example.com","subject":"Your refund"}`)},
				after: between(time.Minute, 4*time.Minute), by: pick("alice", "bob"), cost: 0.002, reason: "Tone is off: rewrite it"}
		default:
			s = scripted{call: gitPush("release-2.8", id), after: between(30*time.Second, 6*time.Minute), by: pick("alice", "bob"), cost: 0.001,
				reason: "Not during the release freeze"}
		}
		tool := s.call.ToolName
		switch p := patterns[tool]; p[turns[tool]%len(p)] {
		case 'A':
			s.outcome, s.reason = outcomeApprove, ""
		case 'R':
			s.outcome, s.cost = outcomeReject, 0
		case 'T':
			timeout := map[string]time.Duration{"transfer_funds": 15 * time.Minute, "send_email": 5 * time.Minute}[tool]
			s.outcome, s.after, s.by, s.reason, s.cost = outcomeTimeout, timeout+time.Second, "", "", 0
		}
		turns[tool]++
		s.at = at
		if s.decidedAt().After(end) {
			return plan
		}
		plan = append(plan, s)
	}
}

// TestInbox_AnalyticsScreenshot renders the analytics of a busy day, and
// with -screenshot writes them to docs/analytics.png for docs/inbox.md.
func TestInbox_AnalyticsScreenshot(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	clk := new(toolgatetest.Clock)
	in := startInboxWith(t, screenshotAnalyticsPolicy, tokens, inboxOptions{now: clk.Now, analytics: true})
	plan := busyDay(time.Now().Add(-time.Minute))
	in.play(clk, plan)
	in.analytics(func(r *wire.AnalyticsReport) bool { return r.Totals.Decided == int64(len(plan)) })

	p := openPage(t, browser, in.url+"/#analytics")
	p.do(chromedp.EmulateViewport(1200, 1000, chromedp.EmulateScale(2)))
	p.signIn(aliceToken)
	p.until(`document.getElementById('analytics').dataset.state === 'ready'`)
	for _, kind := range []string{"allow_rule", "review_rejections", "approval_timeout"} {
		assert.Equal(t, 1, eval[int](p, `document.querySelectorAll('article.rec[data-kind="`+kind+`"]').length`), kind)
	}
	if !*screenshot {
		return
	}
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	out := filepath.Join("..", "..", "docs", "analytics.png")
	require.NoError(t, os.WriteFile(out, png, 0o644))
	t.Logf("wrote %s (%d KB) from %d calls", out, len(png)/1024, len(plan))
}

package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/oidctest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Single sign-on against a real OpenID provider (internal/oidctest, on
// zitadel/oidc's op package): its discovery, login page, token endpoint
// and published keys.

var (
	ssoAlice = oidctest.User{Subject: "5f0c1a-alice", Username: "alice", Password: "alice-password", Name: "Alice Liddell",
		Email: "alice@example.com", Groups: []string{"payments-leads", "staff"}}
	ssoBob = oidctest.User{Subject: "9b2d7e-bob", Username: "bob", Password: "bob-password", Name: "Bob Stone",
		Email: "bob@example.com", Groups: []string{"staff"}}
	ssoCarol = oidctest.User{Subject: "c4a7f1-carol", Username: "carol", Password: "carol-password", Name: "Carol Reed",
		Email: "carol@example.com", Groups: []string{"contractors"}}
)

const ssoClientID, ssoSecret = "toolgate-inbox", "toolgate-inbox-secret-0001"

// ssoConfig is toolgate's sign-in at p: people are named by their
// username, payments-leads approve and staff read.
func ssoConfig(p *oidctest.Provider) *httpapi.OIDC {
	return &httpapi.OIDC{Issuer: p.Issuer, ClientID: ssoClientID, ClientSecret: ssoSecret, UserClaim: "preferred_username",
		Roles: httpapi.RoleMap{"payments-leads": {httpapi.RoleApprover}, "staff": {httpapi.RoleViewer}}, SessionKey: "a-session-key-of-32-characters-00"}
}

// startSSO serves the inbox with sign-in at a provider of its own that
// knows alice, bob and carol, and tokens for root (admin) and a viewer.
func startSSO(t *testing.T) (*inboxServer, *oidctest.Provider) {
	t.Helper()
	p := oidctest.Start(t, ssoAlice, ssoBob, ssoCarol)
	in := startInboxWith(t, inboxPolicy, adminToken+" root admin\n"+viewerToken+" vic viewer", inboxOptions{oidc: ssoConfig(p)})
	p.AddClient(ssoClientID, ssoSecret, in.srv.URL+"/auth/callback")
	return in, p
}

func aliceIdentity(p *oidctest.Provider) *machine.Identity {
	return &machine.Identity{Issuer: p.Issuer, Subject: ssoAlice.Subject, Name: ssoAlice.Name, Email: ssoAlice.Email}
}

// The API takes the provider's tokens: signature against its published
// keys, issuer, audience, expiry and not-before, each with a little
// tolerance of clocks; a key the provider rotated to is taken without a
// restart, and a provider that cannot be reached refuses, never admits.
func TestOIDC_BearerTokens(t *testing.T) {
	t.Parallel()
	in, p := startSSO(t)
	now := time.Now()
	token := func(user, aud string, nbf, exp time.Time) string { return p.Token(t, user, aud, nbf, exp) }
	valid := token("alice", ssoClientID, now.Add(-time.Minute), now.Add(time.Hour))

	var me httpapi.Me
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", valid, nil, &me))
	assert.Equal(t, httpapi.Me{ID: "alice", Roles: []httpapi.Role{httpapi.RoleApprover, httpapi.RoleViewer}, Groups: ssoAlice.Groups, Identity: aliceIdentity(p)}, me)

	e := in.call(transfer("sso", "bearer-1"))
	var decided machine.Entry
	var raw json.RawMessage
	require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", valid, wire.DecideRequest{Approved: true}, &raw), "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &decided))
	assert.Equal(t, "alice", decided.ApprovedOrRejectedByUserID)
	assert.Equal(t, aliceIdentity(p), decided.DeciderIdentity)
	var chain wire.ReceiptChain
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+e.PendingID+"/receipts", viewerToken, nil, &chain))
	last := chain.Receipts[len(chain.Receipts)-1]
	assert.Equal(t, machine.EventApprove, last.Event)
	assert.Equal(t, aliceIdentity(p), last.Identity, "the receipt names her subject")

	// bob is staff, no payments lead: he reads, and decides nothing.
	bob := token("bob", ssoClientID, now, now.Add(time.Hour))
	other := in.call(transfer("sso", "bearer-2"))
	var body httpapi.ErrorBody
	assert.Equal(t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+other.PendingID, bob, nil, nil))
	assert.Equal(t, http.StatusForbidden, in.do("POST", "/v1/tool-calls/"+other.PendingID+"/decision", bob, wire.DecideRequest{Approved: true}, &body))
	// carol is in no group toolgate maps: she signs in, and reads nothing.
	carol := token("carol", ssoClientID, now, now.Add(time.Hour))
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", carol, nil, &me))
	assert.Equal(t, "carol", me.ID)
	assert.Empty(t, me.Roles)
	assert.Equal(t, http.StatusForbidden, in.do("GET", "/v1/tool-calls", carol, nil, &body))
	assert.Equal(t, http.StatusForbidden, in.do("GET", "/v1/tool-calls/"+other.PendingID, carol, nil, &body))

	otherIssuer := oidctest.Start(t, ssoAlice)
	refused := map[string]string{
		"expired":              token("alice", ssoClientID, now.Add(-time.Hour), now.Add(-time.Minute)),
		"not yet valid":        token("alice", ssoClientID, now.Add(5*time.Minute), now.Add(time.Hour)),
		"for another audience": token("alice", "another-app", now, now.Add(time.Hour)),
		"of another issuer":    otherIssuer.Token(t, "alice", ssoClientID, now, now.Add(time.Hour)),
		"not a JWT":            "not-a-token-of-anyone-0000",
		"tampered":             valid[:len(valid)-4] + "AAAA",
	}
	for name, tok := range refused {
		body = httpapi.ErrorBody{}
		assert.Equal(t, http.StatusUnauthorized, in.do("GET", "/v1/me", tok, nil, &body), "a token %s", name)
		assert.Equal(t, "unauthorized", body.Error.Code, "a token %s: %s", name, body.Error.Message)
	}
	// Clocks a few seconds apart agree.
	assert.Equal(t, http.StatusOK, in.do("GET", "/v1/me", token("alice", ssoClientID, now.Add(10*time.Second), now.Add(-10*time.Second)), nil, nil),
		"a token expired or not yet valid by less than the tolerance")

	// The provider rotates its key: a token it signs with the new one is
	// taken at once, and one of the old key still is while the provider
	// publishes it.
	p.Rotate()
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", token("alice", ssoClientID, now, now.Add(time.Hour)), nil, &me), "a token of the rotated key")
	assert.Equal(t, "alice", me.ID)
	assert.Equal(t, http.StatusOK, in.do("GET", "/v1/me", valid, nil, nil))

	// The provider goes away after rotating again: a token of a key
	// nobody can fetch is refused as unavailable, not let through; one
	// of a key already known still works.
	p.Rotate()
	unknownKey := token("alice", ssoClientID, now, now.Add(time.Hour))
	p.Close()
	body = httpapi.ErrorBody{}
	assert.Equal(t, http.StatusServiceUnavailable, in.do("GET", "/v1/me", unknownKey, nil, &body))
	assert.Contains(t, body.Error.Message, "the OpenID provider "+p.Issuer+" cannot be reached")
	assert.Equal(t, http.StatusOK, in.do("GET", "/v1/me", valid, nil, nil))
	// The token file still serves machines.
	assert.Equal(t, http.StatusOK, in.do("GET", "/v1/me", adminToken, nil, nil))
}

// browser is a Go HTTP client that keeps cookies and follows redirects,
// as a browser does for a sign-in.
type browser struct {
	t *testing.T
	*http.Client
}

func newBrowser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, Client: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

// signIn signs user in at the inbox at base through the provider's login
// form, and returns the session cookie as the inbox set it.
func (b *browser) signIn(base, username, password string) *http.Cookie {
	b.t.Helper()
	var setCookie *http.Cookie
	b.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		for _, c := range req.Response.Cookies() {
			if c.Name == "toolgate_session" {
				setCookie = c
			}
		}
		return nil
	}
	resp, err := b.Get(base + "/auth/login?return=/%3Ffrom%3Dsignin")
	require.NoError(b.t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(b.t, http.StatusOK, resp.StatusCode, "%s", page)
	require.Contains(b.t, string(page), "Test provider", "the provider's own login page")
	id := between(string(page), `name="id" value="`, `"`)
	resp, err = b.PostForm(resp.Request.URL.Scheme+"://"+resp.Request.URL.Host+"/login", url.Values{"id": {id}, "username": {username}, "password": {password}})
	require.NoError(b.t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(b.t, http.StatusOK, resp.StatusCode, "%s", page)
	require.Equal(b.t, base+"/?from=signin", resp.Request.URL.String(), "back where the sign-in started")
	require.NotNil(b.t, setCookie, "the callback set the session")
	return setCookie
}

func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}

// send sends a request with the browser's cookies, from origin if set.
func (b *browser) send(method, u, origin string, body any, out any) int {
	b.t.Helper()
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = strings.NewReader(string(data))
	}
	req, err := http.NewRequest(method, u, r)
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	if out != nil {
		data, _ := io.ReadAll(resp.Body)
		require.NoError(b.t, json.Unmarshal(data, out), "%s", data)
	}
	return resp.StatusCode
}

// The inbox's session: a cookie only the server reads (HttpOnly,
// SameSite=Lax, expiring with the session), good at every process that
// shares the key, refused to a request from a page that does not say it
// is the inbox's, and ended by signing out.
func TestOIDC_Session(t *testing.T) {
	t.Parallel()
	in, p := startSSO(t)
	b := newBrowser(t)
	c := b.signIn(in.srv.URL, "alice", "alice-password")
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteLaxMode, c.SameSite)
	assert.False(t, c.Secure, "over plain HTTP (Secure under TLS)")
	assert.InDelta(t, 8*time.Hour.Seconds(), float64(c.MaxAge), 5, "the cookie ends with the session")
	assert.Less(t, len(c.Value), 3800)

	var me httpapi.Me
	require.Equal(t, http.StatusOK, b.send("GET", in.srv.URL+"/v1/me", "", nil, &me))
	assert.Equal(t, httpapi.Me{ID: "alice", Roles: []httpapi.Role{httpapi.RoleApprover, httpapi.RoleViewer}, Groups: ssoAlice.Groups, Identity: aliceIdentity(p), Session: true}, me)

	// Another process with the same key takes the session.
	events := bustest.RunEventsFeed(t, in.tg.JS)
	second, err := httpapi.New(httpapi.Config{Gate: in.gate, Events: events, OIDC: *ssoConfig(p), Log: bustest.Logger()})
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "http://localhost/v1/me", nil)
	req.AddCookie(c)
	rec := httptest.NewRecorder()
	second.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	// One with another key does not, nor a cookie changed.
	cfg := ssoConfig(p)
	cfg.SessionKey = strings.Repeat("x", 40)
	third, err := httpapi.New(httpapi.Config{Gate: in.gate, Events: events, OIDC: *cfg, Log: bustest.Logger()})
	require.NoError(t, err)
	rec = httptest.NewRecorder()
	third.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	req = httptest.NewRequest("GET", "http://localhost/v1/me", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value[:len(c.Value)-2] + "AA"})
	rec = httptest.NewRecorder()
	second.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)

	// A decision by the session comes from the inbox's page.
	e := in.call(transfer("sso", "session-1"))
	decision := in.srv.URL + "/v1/tool-calls/" + e.PendingID + "/decision"
	var body httpapi.ErrorBody
	assert.Equal(t, http.StatusForbidden, b.send("POST", decision, "", wire.DecideRequest{Approved: true}, &body), "no Origin")
	assert.Equal(t, http.StatusForbidden, b.send("POST", decision, "https://evil.example", wire.DecideRequest{Approved: true}, &body), "another site")
	var decided machine.Entry
	require.Equal(t, http.StatusOK, b.send("POST", decision, in.srv.URL, wire.DecideRequest{Approved: true}, &decided))
	assert.Equal(t, aliceIdentity(p), decided.DeciderIdentity)

	assert.Equal(t, http.StatusForbidden, b.send("POST", in.srv.URL+"/auth/logout", "", nil, nil), "signing out comes from the page too")
	assert.Equal(t, http.StatusNoContent, b.send("POST", in.srv.URL+"/auth/logout", in.srv.URL, nil, nil))
	assert.Equal(t, http.StatusUnauthorized, b.send("GET", in.srv.URL+"/v1/me", "", nil, nil))
}

// A sign-in the provider's answer does not match is refused, saying why;
// so is one while the provider cannot be reached.
func TestOIDC_SignInRefusals(t *testing.T) {
	t.Parallel()
	in, p := startSSO(t)
	b := newBrowser(t)
	b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string) (int, string) {
		resp, err := b.Get(in.srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	status, page := get("/auth/callback?code=x&state=y")
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, page, "no sign-in under way in this browser")

	status, _ = get("/auth/login")
	require.Equal(t, http.StatusFound, status)
	status, page = get("/auth/callback?code=x&state=forged")
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, page, "not for the sign-in this browser started")

	var info httpapi.SignInInfo
	require.Equal(t, http.StatusOK, b.send("GET", in.srv.URL+"/auth/info", "", nil, &info))
	assert.Equal(t, httpapi.SignInInfo{SingleSignOn: true, Issuer: p.Issuer}, info)

	// A process that has not yet discovered the provider, while it is
	// away: the sign-in cannot start.
	p.Close()
	fresh, err := httpapi.New(httpapi.Config{Gate: in.gate, Events: bustest.RunEventsFeed(t, in.tg.JS), OIDC: *ssoConfig(p), Log: bustest.Logger()})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	fresh.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/auth/login", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), fmt.Sprintf("the OpenID provider %s cannot be reached", p.Issuer))
}

func TestOIDC_ConfigurationNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	good := httpapi.OIDC{Issuer: "https://id.example.com", ClientID: "toolgate", SessionKey: strings.Repeat("k", 32)}
	require.NoError(t, good.Check())
	for _, tc := range []struct {
		change func(o *httpapi.OIDC)
		want   string
	}{
		{func(o *httpapi.OIDC) { o.Issuer = "id.example.com" }, "--oidc-issuer"},
		{func(o *httpapi.OIDC) { o.ClientID = "" }, "--oidc-client-id: required"},
		{func(o *httpapi.OIDC) { o.SessionKey = "short" }, "--oidc-session-key: required with --oidc-issuer, at least 32 characters (got 5)"},
		{func(o *httpapi.OIDC) { o.RedirectURL = "https://toolgate.example.com/callback" }, "--oidc-redirect-url"},
		{func(o *httpapi.OIDC) { o.RolesClaim = "realm_access..roles" }, "--oidc-roles-claim"},
	} {
		o := good
		tc.change(&o)
		assert.ErrorContains(t, o.Check(), tc.want)
	}
	var m httpapi.RoleMap
	require.NoError(t, m.Set("payments-leads=approver; sre=admin,viewer"))
	assert.Equal(t, httpapi.RoleMap{"payments-leads": {httpapi.RoleApprover}, "sre": {httpapi.RoleAdmin, httpapi.RoleViewer}}, m)
	assert.ErrorContains(t, m.Set("sre=root"), `unknown role "root"`)
	assert.ErrorContains(t, m.Set("bots=agent"), `unknown role "agent" for a person`)
	assert.ErrorContains(t, m.Set("sre"), "want GROUP=ROLE")
}

// In the browser: alice signs in through the provider's own login page,
// sees the call and approves it, and the entry and its receipt name her
// subject; she signs out, and bob, staff but no payments lead, signs in
// and sees the next call without a button to decide it.
func TestOIDC_InboxSignIn(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in, p := startSSO(t)
	pay := in.call(transfer("sso", "inbox-1"))

	pg := openSignInPage(t, browser, in.url)
	pg.providerSignIn("alice", "alice-password")
	pg.until(cardCount(1))
	who := pg.textOnce("#who", "alice", "approver", "single sign-on")
	assert.Contains(t, who, "alice")
	pg.do(click(button(pay.PendingID, "approve")), chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
	approved := in.entry(pay.PendingID)
	assert.Equal(t, machine.StateApproved, approved.Status)
	assert.Equal(t, "alice", approved.ApprovedOrRejectedByUserID)
	assert.Equal(t, aliceIdentity(p), approved.DeciderIdentity)
	var chain wire.ReceiptChain
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+pay.PendingID+"/receipts", viewerToken, nil, &chain))
	assert.Equal(t, aliceIdentity(p), chain.Receipts[len(chain.Receipts)-1].Identity)

	// The history says how she signed in.
	pg.do(click(chromedp.ID("tab-history")))
	pg.textOnce(`.row[data-id="`+pay.PendingID+`"] .row-signin`, "Alice Liddell <alice@example.com>, signed in at "+p.Issuer+" as "+ssoAlice.Subject)

	pg.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("sso-link")))
	assert.Equal(t, http.StatusUnauthorized, pg.status("v1/me"), "signed out: the session is gone")

	push := in.call(gitPush("sso", "inbox-2"))
	pg.providerSignIn("bob", "bob-password")
	pg.textOnce("#who", "bob", "viewer", "single sign-on")
	pg.until(cardCount(1))
	pg.textOnce(card(push.PendingID), "git push origin release/2.8")
	assert.Zero(t, eval[int](pg, `document.querySelectorAll('`+card(push.PendingID)+` button[data-action="approve"], `+card(push.PendingID)+` button[data-action="reject"]').length`),
		"a viewer's card has no decision buttons")
	assert.Equal(t, http.StatusForbidden, pg.post("v1/tool-calls/"+push.PendingID+"/decision", `{"approved":true}`),
		"his decision, sent from the page as the session, is refused")
	assert.Equal(t, machine.StatePendingApproval, in.entry(push.PendingID).Status)
}

// openSignInPage opens a page on the inbox with cookies of its own. A
// browser keeps a host's cookies whatever the port, and every test's
// inbox is on 127.0.0.1: two tests signing in at once would take each
// other's sign-in and session cookies.
func openSignInPage(t *testing.T, browser context.Context, url string) *page {
	t.Helper()
	return openPage(t, browser, url, chromedp.WithNewBrowserContext())
}

// providerSignIn signs in from the inbox's sign-in screen: its single
// sign-on button, then the provider's own login page.
func (p *page) providerSignIn(username, password string) {
	p.t.Helper()
	p.do(
		chromedp.WaitVisible(chromedp.ID("sso-link")),
		click(chromedp.ID("sso-link")),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), username),
		chromedp.SendKeys(chromedp.ID("password"), password),
		click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
}

// status is the status of a GET the page sends with its cookies.
func (p *page) status(path string) int {
	p.t.Helper()
	return eval[int](p, fmt.Sprintf(`fetch(%s, {cache: 'no-store'}).then((r) => r.status)`, jsString(path)), chromedp.EvalAwaitPromise)
}

// post is the status of a POST of JSON the page sends with its cookies.
func (p *page) post(path, body string) int {
	p.t.Helper()
	return eval[int](p, fmt.Sprintf(`fetch(%s, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: %s}).then((r) => r.status)`,
		jsString(path), jsString(body)), chromedp.EvalAwaitPromise)
}

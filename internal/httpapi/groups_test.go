package httpapi_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/oidctest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Groups in the policy: a call routed to group:payments-leads is decided
// by the people whose sign-in puts them in payments-leads, whatever
// their names; the decision records the group.

// groupsPolicy routes every call to the payments leads, whoever they are.
const groupsPolicy = `
default:
  requiresApprovalTools: all
  approvalTimeoutMs: 1800000
  approvers: ["group:payments-leads"]
  describe:
    transfer_funds: 'Transfer {{.amount}} {{.currency}} to {{.to}}'
`

// Token users carry groups in the token file's fourth column: the
// tokens of docs/approvers.md.
func TestGroups_TokenUsersDecideAsTheirGroups(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/approvers.md")
	require.NoError(t, err)
	_, docTokens, ok := strings.Cut(string(page), "```text\n# tokens")
	require.True(t, ok, "approvers.md: the token file with groups")
	docTokens, _, _ = strings.Cut("# tokens"+docTokens, "```")
	const aliceToken, bobToken = "b0c1d2e3f4a5b6c7d8e9", "c1d2e3f4a5b6c7d8e9f0"
	require.Contains(t, docTokens, aliceToken+" alice")
	require.Contains(t, docTokens, bobToken+" bob")
	in := startInbox(t, groupsPolicy, adminToken+" root admin\n"+viewerToken+" vic viewer\n"+docTokens)
	var me httpapi.Me
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", aliceToken, nil, &me))
	assert.Equal(t, httpapi.Me{ID: "alice", Roles: []httpapi.Role{httpapi.RoleApprover}, Groups: []string{"staff", "payments-leads"}}, me)

	e := in.call(transfer("groups", "token-1"))
	assert.Equal(t, []string{"group:payments-leads"}, e.Approvers)
	var body httpapi.ErrorBody
	require.Equal(t, http.StatusForbidden, in.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: true}, &body))
	assert.Contains(t, body.Error.Message, "bob is not among this call's approvers [group:payments-leads], nor in a group they name")
	var decided machine.Entry
	require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", aliceToken, wire.DecideRequest{Approved: true}, &decided))
	assert.Equal(t, "alice", decided.ApprovedOrRejectedByUserID)
	assert.Equal(t, "payments-leads", decided.DeciderViaGroup)
	var chain wire.ReceiptChain
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+e.PendingID+"/receipts", viewerToken, nil, &chain))
	assert.Equal(t, "payments-leads", chain.Receipts[len(chain.Receipts)-1].ViaGroup)
}

func TestParseTokens_Groups(t *testing.T) {
	t.Parallel()
	for data, want := range map[string]string{
		"long-enough-token-01 alice approver leads extra": "want TOKEN USER ROLE[,ROLE…] [GROUP[,GROUP…]], got 5 fields",
		"long-enough-token-01 group:leads approver":       "a user's name does not start with group:",
		"long-enough-token-01 alice approver leads,,sre":  "want at most 200 groups of 1 to 256 bytes",
	} {
		_, err := httpapi.ParseTokens([]byte(data))
		assert.ErrorContains(t, err, want, data)
	}
}

// A provider's groups: from the roles claim by default, or a claim of
// their own (--oidc-groups-claim).
func TestGroups_FromTheProvidersClaim(t *testing.T) {
	t.Parallel()
	erin := oidctest.User{Subject: "e1", Username: "erin", Password: "erin-password", Email: "erin@example.com",
		Groups: []string{"staff"}, Claims: map[string]any{"teams": []string{"payments-leads", "sre"}}}
	p := oidctest.Start(t, erin)
	cfg := ssoConfig(p)
	in := startInboxWith(t, groupsPolicy, adminToken+" root admin", inboxOptions{oidc: cfg})
	now := time.Now()
	token := p.Token(t, "erin", ssoClientID, now, now.Add(time.Hour))
	var me httpapi.Me
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", token, nil, &me))
	assert.Equal(t, []string{"staff"}, me.Groups, "the roles claim's values, by default")

	cfg.GroupsClaim = "teams"
	in = startInboxWith(t, groupsPolicy, adminToken+" root admin", inboxOptions{oidc: cfg})
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", token, nil, &me))
	assert.Equal(t, []string{"payments-leads", "sre"}, me.Groups)
	assert.Equal(t, []httpapi.Role{httpapi.RoleViewer}, me.Roles, "roles still come from the roles claim")

	cfg.GroupsClaim = "teams..x"
	assert.ErrorContains(t, cfg.Check(), "--oidc-groups-claim")
}

// In the browser: alice, in payments-leads at the provider, signs in and
// approves a call routed to group:payments-leads; the entry and its
// receipt name her subject and the group. bob, an approver signed in but
// in no such group, sees the next call without decision buttons, and
// his decision through the API is refused.
func TestGroups_InboxSignIn(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	bob := ssoBob
	bob.Groups = []string{"support-leads", "staff"}
	p := oidctest.Start(t, ssoAlice, bob)
	cfg := ssoConfig(p)
	cfg.Roles["support-leads"] = []httpapi.Role{httpapi.RoleApprover}
	in := startInboxWith(t, groupsPolicy, adminToken+" root admin\n"+viewerToken+" vic viewer", inboxOptions{oidc: cfg})
	p.AddClient(ssoClientID, ssoSecret, in.srv.URL+"/auth/callback")
	pay := in.call(transfer("groups", "inbox-1"))

	pg := openSignInPage(t, browser, in.url)
	pg.providerSignIn("alice", "alice-password")
	pg.until(cardCount(1))
	pg.do(click(button(pay.PendingID, "approve")), chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
	approved := in.entry(pay.PendingID)
	assert.Equal(t, machine.StateApproved, approved.Status)
	assert.Equal(t, "alice", approved.ApprovedOrRejectedByUserID)
	assert.Equal(t, aliceIdentity(p), approved.DeciderIdentity)
	assert.Equal(t, "payments-leads", approved.DeciderViaGroup)
	var chain wire.ReceiptChain
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+pay.PendingID+"/receipts", viewerToken, nil, &chain))
	last := chain.Receipts[len(chain.Receipts)-1]
	assert.Equal(t, machine.EventApprove, last.Event)
	assert.Equal(t, aliceIdentity(p), last.Identity)
	assert.Equal(t, "payments-leads", last.ViaGroup)
	pg.do(click(chromedp.ID("tab-history")))
	pg.textOnce(`.row[data-id="`+pay.PendingID+`"] .row-group`, "via group payments-leads")

	pg.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("sso-link")))
	next := in.call(transfer("groups", "inbox-2"))
	pg.providerSignIn("bob", "bob-password")
	pg.textOnce("#who", "bob", "approver")
	pg.do(click(chromedp.ID("tab-inbox")))
	pg.until(cardCount(1))
	pg.textOnce(card(next.PendingID)+" .card-note", "Only members of payments-leads can decide this call.")
	assert.Zero(t, eval[int](pg, `document.querySelectorAll('`+card(next.PendingID)+` button[data-action="approve"], `+card(next.PendingID)+` button[data-action="reject"]').length`),
		"no decision buttons for one the call's approvers do not admit")
	assert.Equal(t, http.StatusForbidden, pg.post("v1/tool-calls/"+next.PendingID+"/decision", `{"approved":true}`),
		"his decision, sent from the page as the session, is refused")
	now := time.Now()
	var body httpapi.ErrorBody
	assert.Equal(t, http.StatusForbidden, in.do("POST", "/v1/tool-calls/"+next.PendingID+"/decision", p.Token(t, "bob", ssoClientID, now, now.Add(time.Hour)),
		wire.DecideRequest{Approved: true}, &body), "and with the provider's token")
	assert.Contains(t, body.Error.Message, "nor in a group they name")
	assert.Equal(t, machine.StatePendingApproval, in.entry(next.PendingID).Status)
}

// A person whose groups do not fit the session cookie signs in without
// them: their roles hold, and they decide only what names them.
func TestGroups_TooManyForTheSessionSignsInWithout(t *testing.T) {
	t.Parallel()
	many := oidctest.User{Subject: "m1", Username: "mallory", Password: "mallory-password", Email: "mallory@example.com", Groups: []string{"payments-leads"}}
	for i := range 150 {
		many.Groups = append(many.Groups, fmt.Sprintf("a-group-with-a-long-name-%03d", i))
	}
	p := oidctest.Start(t, many)
	in := startInboxWith(t, groupsPolicy, adminToken+" root admin", inboxOptions{oidc: ssoConfig(p)})
	p.AddClient(ssoClientID, ssoSecret, in.srv.URL+"/auth/callback")
	now := time.Now()
	var me httpapi.Me
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/me", p.Token(t, "mallory", ssoClientID, now, now.Add(time.Hour)), nil, &me))
	assert.Len(t, me.Groups, 151, "a bearer token's groups are the token's")

	b := newBrowser(t)
	b.signIn(in.srv.URL, "mallory", "mallory-password")
	me = httpapi.Me{}
	require.Equal(t, http.StatusOK, b.send("GET", in.srv.URL+"/v1/me", "", nil, &me))
	assert.Equal(t, []httpapi.Role{httpapi.RoleApprover}, me.Roles)
	assert.Empty(t, me.Groups, "the session holds none of them")
	e := in.call(transfer("groups", "many-1"))
	var body httpapi.ErrorBody
	assert.Equal(t, http.StatusForbidden, b.send("POST", in.srv.URL+"/v1/tool-calls/"+e.PendingID+"/decision", in.srv.URL, wire.DecideRequest{Approved: true}, &body))
}

// The Approve link a notification carries (an email's, without an
// approver of its own: <inboxUrl>/#/calls/<id>?decision=approve), opened
// by a payments lead who is not signed in: the inbox signs her in at the
// provider, comes back to the call with Approve at hand, and one click
// decides as her; the same link opened again says who decided.
func TestGroups_ANotificationsLinkSignsInAndDecidesAsThePerson(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	p := oidctest.Start(t, ssoAlice)
	in := startInboxWith(t, groupsPolicy, adminToken+" root admin\n"+viewerToken+" vic viewer", inboxOptions{oidc: ssoConfig(p)})
	p.AddClient(ssoClientID, ssoSecret, in.srv.URL+"/auth/callback")
	pay := in.call(transfer("groups", "link-1"))
	link := in.url + "/#/calls/" + pay.PendingID + "?decision=approve"

	pg := openSignInPage(t, browser, link)
	pg.providerSignIn("alice", "alice-password")
	pg.until(`document.activeElement && document.activeElement.matches('` + card(pay.PendingID) + ` button[data-action="approve"]')`)
	pg.do(click(button(pay.PendingID, "approve")), chromedp.WaitNotPresent(chromedp.CSS(card(pay.PendingID))))
	approved := in.entry(pay.PendingID)
	assert.Equal(t, machine.StateApproved, approved.Status)
	assert.Equal(t, "alice", approved.ApprovedOrRejectedByUserID)
	assert.Equal(t, aliceIdentity(p), approved.DeciderIdentity)
	assert.Equal(t, "payments-leads", approved.DeciderViaGroup)

	pg.do(chromedp.Navigate(in.url + "/#inbox"))
	pg.do(chromedp.Navigate(link))
	pg.textOnce("#link-note", "This call needs no decision any more", "approved by alice")
}

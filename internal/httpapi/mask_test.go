package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// The call every masking test reads: a value a redact pattern names and a
// key shaped like a credential inside a string.
const (
	liveKey    = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"
	maskedArgs = `{"body":"staging key [redacted] for the deploy","pin":"[redacted]"}`
	clearArgs  = `{"body":"staging key ` + liveKey + ` for the deploy","pin":"4321"}`
	maskedDesc = "Post staging key [redacted] for the deploy with pin [redacted]"
)

func maskPolicy(hook string) string {
	return fmt.Sprintf(`
default:
  requiresApprovalTools: all
  redact: ["pin"]
  describe:
    post: 'Post {{.body}} with pin {{.pin}}'
  notify: [{type: webhook, url: %q, secret: hook-secret}]
`, hook)
}

// TestMask_OneViewEverywhere submits one call and reads it through every
// path a person reads it by (the event stream the inbox follows, the list,
// get, the history, a webhook's delivery), in open mode and as each role's
// token: every read is the one masked view, marked secretsMasked, its
// description rendered from it. Revealing the arguments is an admin's (the
// policy's default), refused to an approver and a viewer, and the history
// records who was shown them.
func TestMask_OneViewEverywhere(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name, tokens string
		readers      map[string]string // role: token ("" in open mode)
	}{
		{"open", "", map[string]string{"admin": ""}},
		{"tokens", tokens, map[string]string{"admin": adminToken, "approver": aliceToken, "viewer": viewerToken}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			hooks := make(chan []byte, 10)
			hook := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				hooks <- body
			}))
			t.Cleanup(hook.Close)
			g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "http", "notifier"}, Policy: maskPolicy(hook.URL), Tokens: mode.tokens})
			srv := httptest.NewServer(g.Main.HTTPHandler())
			t.Cleanup(srv.Close)
			h := &harness{t: t, url: srv.URL}
			streams := map[string]*sse{}
			for role, token := range mode.readers {
				streams[role] = h.eventsAs(token, "", "")
			}

			bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
			e, err := g.Service.Submit(t.Context(), bot, machine.Call{ToolCallID: "k1", ToolName: "post", ConversationID: "keys", Arguments: json.RawMessage(clearArgs)})
			require.NoError(t, err)
			assert.JSONEq(t, clearArgs, string(e.ToolArguments), "the agent that asked gets its arguments")
			assert.False(t, e.SecretsMasked)

			// shown holds one read of the call to the one masked view.
			shown := func(path string, raw []byte, got *machine.Entry) {
				t.Helper()
				assert.NotContains(t, string(raw), liveKey, path)
				assert.NotContains(t, string(raw), "4321", path)
				require.NotNil(t, got, path)
				assert.JSONEq(t, maskedArgs, string(got.ToolArguments), path)
				assert.Equal(t, maskedDesc, got.Description, path)
				assert.True(t, got.SecretsMasked, path)
			}
			select {
			case body := <-hooks:
				var ev wire.Event
				require.NoError(t, json.Unmarshal(body, &ev))
				shown("webhook", body, ev.Entry)
			case <-time.After(30 * time.Second):
				t.Fatal("no webhook delivery within 30s")
			}
			for role, token := range mode.readers {
				ev := streams[role].next(t)
				raw, _ := json.Marshal(ev.data)
				shown(role+": live event", raw, ev.data.Entry)

				var page wire.ListPage
				raw = h.raw("GET", "/v1/tool-calls?conversationId=keys", token, &page)
				require.Len(t, page.Items, 1)
				shown(role+": list", raw, page.Items[0])
				var got machine.Entry
				raw = h.raw("GET", "/v1/tool-calls/"+e.PendingID, token, &got)
				shown(role+": get", raw, &got)
				var history []wire.HistoryItem
				raw = h.raw("GET", "/v1/tool-calls/"+e.PendingID+"/history", token, &history)
				assert.NotContains(t, string(raw), liveKey, role+": history")
				assert.NotEmpty(t, history, role+": history")
			}

			for role, token := range mode.readers {
				var reply wire.RevealReply
				status := h.do("POST", "/v1/tool-calls/"+e.PendingID+"/reveal", token, nil, &reply)
				if role != "admin" {
					assert.Equal(t, http.StatusForbidden, status, "%s may not reveal", role)
					continue
				}
				require.Equal(t, http.StatusOK, status)
				assert.JSONEq(t, clearArgs, string(reply.ToolArguments), "revealed")
				var history []wire.HistoryItem
				require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+e.PendingID+"/history", token, nil, &history))
				last := history[len(history)-1]
				assert.Equal(t, wire.HistoryRevealed, last.Event, "the history records the reveal")
				assert.Equal(t, reply.Reveal.By, last.Actor)
				assert.Equal(t, map[bool]string{true: "anonymous", false: "root"}[mode.tokens == ""], last.Actor)
				var again machine.Entry
				h.raw("GET", "/v1/tool-calls/"+e.PendingID, token, &again)
				shown(role+": get after a reveal", nil, &again)
			}
		})
	}
}

// raw sends a GET as the holder of token, wants 200, decodes the reply
// into out and returns its bytes.
func (h *harness) raw(method, path, token string, out any) []byte {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, nil)
	require.NoError(h.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, body)
	require.NoError(h.t, json.Unmarshal(body, out), strings.TrimSpace(string(body)))
	return body
}

// TestInbox_SecretsReadTheSameLiveAndAfterAReload: a call with secrets
// that arrives while the page is open reads masked, with its badge, and
// reads exactly so after a reload; "Show" reveals its arguments to an
// admin and is refused to an approver, saying why.
func TestInbox_SecretsReadTheSameLiveAndAfterAReload(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	in := startInbox(t, maskPolicy("https://hooks.example/toolgate"), tokens)
	p := openPage(t, browser, in.url)
	p.signIn(adminToken)
	p.until(live)

	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	e, err := in.gate.Submit(t.Context(), bot, machine.Call{ToolCallID: "k1", ToolName: "post", ConversationID: "keys", Arguments: json.RawMessage(clearArgs)})
	require.NoError(t, err)
	c := card(e.PendingID)
	p.do(chromedp.WaitVisible(chromedp.CSS(c)))
	read := func() string {
		t.Helper()
		return p.text(c+` .description`) + "\n" + p.text(c+` .args pre.json`) + "\n" + p.text(c+` .secret-badge`)
	}
	liveText := read()
	assert.Contains(t, liveText, maskedDesc)
	assert.Contains(t, liveText, `"pin": "[redacted]"`)
	assert.Contains(t, liveText, "Secret", "the badge")
	assert.NotContains(t, liveText, liveKey)
	assert.NotContains(t, liveText, "4321")

	p.do(chromedp.Reload())
	p.do(chromedp.WaitVisible(chromedp.CSS(c)))
	p.until(live)
	assert.Equal(t, liveText, read(), "the card reads the same after a reload")

	p.do(click(button(e.PendingID, "reveal")))
	p.until(`document.querySelector('` + c + ` .args').classList.contains('args-revealed')`)
	assert.Contains(t, p.text(c+` .args pre.json`), liveKey, "shown to the admin")

	p.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
	p.signIn(aliceToken)
	p.do(chromedp.WaitVisible(chromedp.CSS(c)), click(button(e.PendingID, "reveal")), chromedp.WaitVisible(chromedp.CSS(c+` .reveal-error`)))
	assert.Contains(t, p.text(c+` .reveal-error`), "may not reveal")
	assert.NotContains(t, p.text(c+` .args pre.json`), liveKey, "refused to an approver")

	var history []wire.HistoryItem
	require.Equal(t, http.StatusOK, in.do("GET", "/v1/tool-calls/"+e.PendingID+"/history", viewerToken, nil, &history))
	var revealed []string
	for _, it := range history {
		if it.Event == wire.HistoryRevealed {
			revealed = append(revealed, it.Actor)
		}
	}
	assert.Equal(t, []string{"root"}, revealed, "the admin's reveal is recorded, the refused one is not")

	// Decided, its history row has the badge, the reveal in words, and a
	// Show of its own.
	require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", bobToken, wire.DecideRequest{Approved: false, Reason: "not today"}, nil))
	p.do(click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
	p.signIn(adminToken)
	q := openPage(t, browser, in.url+"/#/calls/"+e.PendingID)
	row := `li.row[data-id="` + e.PendingID + `"]`
	q.do(chromedp.WaitVisible(chromedp.CSS(row + `.row-target .timeline`)))
	assert.Equal(t, "Secret", q.text(row+` .secret-badge`))
	timeline := q.textOnce(row+` .row-details`, "Arguments shown in clear to root")
	assert.Contains(t, timeline, `"pin": "[redacted]"`)
	q.do(click(chromedp.CSS(row + ` button[data-action="reveal"]`)))
	q.until(`document.querySelector('` + row + ` .args').classList.contains('args-revealed')`)
	assert.Contains(t, q.text(row+` .args pre.json`), liveKey, "shown to the admin from the history too")
}

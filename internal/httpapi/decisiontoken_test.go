package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// captured is one request a fake receiver got.
type captured struct {
	path   string
	header http.Header
	body   []byte
}

// receiver is a fake ntfy server or webhook receiver.
func receiver(t *testing.T) (*httptest.Server, chan captured) {
	got := make(chan captured, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- captured{path: r.URL.Path, header: r.Header.Clone(), body: body}
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// waitNotifier waits for g's notifier to follow the events: it starts at
// the stream's end, so a call submitted before would not be told of.
func waitNotifier(t *testing.T, g *toolgatetest.Gate) {
	t.Helper()
	bustest.Eventually(t, 20*time.Second, 5*time.Millisecond, "the notifier's consumer appeared", func() (bool, any) {
		_, err := g.JS.Consumer(t.Context(), wire.EventsStream, worker.NotifierDurable)
		return err == nil, err
	})
}

func next(t *testing.T, ch chan captured, what string) captured {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: nothing arrived", what)
		return captured{}
	}
}

// post sends a request as a phone's ntfy app or a receiver would: no
// bearer token, JSON.
func post(t *testing.T, url string, header map[string]string, body string) (int, wire.ErrorBody, machine.Entry) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e machine.Entry
	var eb wire.ErrorBody
	if resp.StatusCode == 200 {
		require.NoError(t, json.Unmarshal(data, &e), "%s", data)
	} else {
		require.NoError(t, json.Unmarshal(data, &eb), "%s", data)
	}
	return resp.StatusCode, eb, e
}

// TestDecisionLinks_NtfyActionDecidesOnceAsTheChannelsApprover runs
// toolgate (token mode) with an ntfy channel and a webhook channel that
// name their approvers. The ntfy notification is in ntfy's JSON format
// with http actions; following its Approve link with GET (a preview bot)
// decides nothing; POSTing it as the action says approves the call as
// alice, without a bearer token; POSTing it again is refused; the
// webhook's Reject link, for the same call, is refused as the call is
// decided; and a cross-site POST or a forged token decides nothing.
func TestDecisionLinks_NtfyActionDecidesOnceAsTheChannelsApprover(t *testing.T) {
	t.Parallel()
	ntfy, ntfyGot := receiver(t)
	hook, hookGot := receiver(t)
	g := toolgatetest.Start(t, toolgatetest.Options{
		Roles:  []string{"relay", "intake", "http", "notifier"},
		Tokens: "alice-token-000000001 alice approver\n",
	})
	doc := fmt.Sprintf(`default:
  approvers: [alice, bob]
  inboxUrl: %q
  notify:
    - {type: ntfy, url: %q, topic: approvals, approver: alice}
    - {type: webhook, url: %q, secret: s3cret, approver: bob}
`, g.HTTPURL+"/", ntfy.URL, hook.URL+"/hook")
	waitNotifier(t, g)
	_, err := g.Service.SetPolicy(t.Context(), gate.System, wire.PolicyDocument{Document: doc})
	require.NoError(t, err)
	// Submit until the policy just set is the one in force: its call is
	// the one notified.
	var e *machine.Entry
	n := 0
	bustest.Eventually(t, 20*time.Second, 10*time.Millisecond, "the policy set in force", func() (bool, any) {
		n++
		e, err = g.Service.Submit(t.Context(), gate.System, machine.Call{ToolCallID: fmt.Sprint("t", n), ToolName: "deploy",
			CallerBotID: "bot-1", ConversationID: "c1", Arguments: json.RawMessage(`{"env":"prod"}`)})
		require.NoError(t, err)
		return slices.Equal(e.Approvers, []string{"alice", "bob"}), fmt.Sprintf("approvers %v", e.Approvers)
	})

	var msg struct {
		Topic, Title, Message, Click string
		Actions                      []struct {
			Action, Label, URL, Method, Body string
			Headers                          map[string]string
			Clear                            bool
		}
	}
	// A call submitted while the notifier already had the new channels
	// but the intake the old policy is notified too: skip to e's.
	var got captured
	for !strings.Contains(string(got.body), "/#/calls/"+e.PendingID+`"`) {
		got = next(t, ntfyGot, "the ntfy notification of "+e.PendingID)
	}
	assert.Equal(t, "/", got.path, "JSON publishing goes to the server's root")
	assert.Equal(t, "application/json", got.header.Get("Content-Type"))
	require.NoError(t, json.Unmarshal(got.body, &msg), "%s", got.body)
	assert.Equal(t, "approvals", msg.Topic)
	assert.Equal(t, "Approval needed: deploy", msg.Title)
	require.Len(t, msg.Actions, 3, "%s", got.body)
	approve, reject, view := msg.Actions[0], msg.Actions[1], msg.Actions[2]
	prefix := g.HTTPURL + worker.DecisionTokenPath
	for _, a := range []struct {
		Action, Label, URL, Method, Body string
		Headers                          map[string]string
		Clear                            bool
	}{approve, reject} {
		assert.Equal(t, "http", a.Action)
		assert.Equal(t, "POST", a.Method)
		assert.True(t, strings.HasPrefix(a.URL, prefix), "%s", a.URL)
		assert.Equal(t, "application/json", a.Headers["Content-Type"])
		assert.True(t, a.Clear)
	}
	assert.Equal(t, "Approve", approve.Label)
	assert.Equal(t, "Reject", reject.Label)
	assert.Equal(t, "view", view.Action)
	assert.Equal(t, g.HTTPURL+"/#/calls/"+e.PendingID, view.URL)

	var hookReq captured
	for !strings.Contains(string(hookReq.body), `"pendingId":"`+e.PendingID+`"`) {
		hookReq = next(t, hookGot, "the webhook delivery of "+e.PendingID)
	}
	hookReject := hookReq.header.Get(worker.HeaderDecisionReject)
	assert.True(t, strings.HasPrefix(hookReject, prefix), "%q", hookReject)
	assert.True(t, strings.HasPrefix(hookReq.header.Get(worker.HeaderDecisionApprove), prefix))
	assert.NotEqual(t, hookReject, reject.URL, "each channel its own tokens")

	// A link preview bot follows the link: a page, no decision.
	resp, err := http.Get(approve.URL)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(page), "Approve deploy?")
	assert.Contains(t, string(page), "Approve as alice")
	assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	cur, err := g.Service.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, cur.Status, "GET decides nothing")

	// Another site's page cannot make a browser redeem it.
	status, _, _ := post(t, approve.URL, map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, "{}")
	assert.Equal(t, 403, status)
	status, _, _ = post(t, approve.URL, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "a=b")
	assert.Equal(t, 415, status, "a form's POST is refused")
	// A forged token.
	status, eb, _ := post(t, prefix+strings.Repeat("A", 43), approve.Headers, approve.Body)
	assert.Equal(t, 404, status, "%+v", eb)

	// The phone's action: decided, as the channel's approver.
	status, eb, decided := post(t, approve.URL, approve.Headers, approve.Body)
	require.Equal(t, 200, status, "%+v", eb)
	assert.Equal(t, machine.StateApproved, decided.Status)
	assert.Equal(t, "alice", decided.ApprovedOrRejectedByUserID)

	status, eb, _ = post(t, approve.URL, approve.Headers, approve.Body)
	assert.Equal(t, 409, status)
	assert.Contains(t, eb.Error.Message, "already used")
	status, eb, _ = post(t, hookReject, map[string]string{"Content-Type": "application/json"}, "")
	assert.Equal(t, 409, status, "the call is decided: %+v", eb)
	cur, err = g.Service.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, cur.Status)
	assert.Equal(t, "alice", cur.ApprovedOrRejectedByUserID)

	resp, err = http.Get(approve.URL)
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 410, resp.StatusCode)
	assert.Contains(t, string(page), "used already")
	assert.False(t, bytes.Contains(page, []byte("<button")), "no button on a used link")
}

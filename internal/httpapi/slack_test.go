package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// slackCard is what of a card the test reads.
type slackCard struct {
	Text   string `json:"text"`
	Blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			Text     struct{ Text string } `json:"text"`
			ActionID string                `json:"action_id"`
			Value    string                `json:"value"`
			URL      string                `json:"url"`
		} `json:"elements"`
	} `json:"blocks"`
}

// slackReply is what toolgate posts to a response_url.
type slackReply struct {
	ResponseType    string           `json:"response_type"`
	ReplaceOriginal bool             `json:"replace_original"`
	Text            string           `json:"text"`
	Blocks          []map[string]any `json:"blocks"`
}

// TestSlack_SignedClickDecidesOnceAndReplacesTheCard runs toolgate with an
// interactive Slack channel (its app's signing secret, two users mapped)
// against a local fake of Slack: the incoming webhook the card is posted
// to, and the response_url a click is answered at. The card's buttons
// carry the call's id; a click with a forged signature or an old
// timestamp is refused and changes nothing; an unmapped user is told so,
// privately, and nothing changes; a signed click by a mapped approver
// approves the call as them and replaces the card with the outcome; the
// same click again is told who decided already.
func TestSlack_SignedClickDecidesOnceAndReplacesTheCard(t *testing.T) {
	t.Parallel()
	slack, cards := receiver(t)
	responses, got := receiver(t)
	g := toolgatetest.Start(t, toolgatetest.Options{
		Roles:  []string{"relay", "intake", "notifier"},
		Tokens: "alice-token-000000001 alice approver\n",
		Policy: fmt.Sprintf(`default:
  approvers: [alice]
  notify:
    - type: slack
      url: %q
      signingSecret: %q
      slackUsers: {U0ALICE: alice, U0BOB: bob}
`, slack.URL+"/services/T/B/X", slackSecret),
	})
	toks, err := httpapi.ParseTokens([]byte("alice-token-000000001 alice approver\n"))
	require.NoError(t, err)
	api, err := httpapi.New(httpapi.Config{Gate: g.Service, Events: bustest.RunEventsFeed(t, g.JS), Tokens: toks, Log: bustest.Logger(),
		SlackResponseURL: func(u *url.URL) bool { return u.Host == strings.TrimPrefix(responses.URL, "http://") }})
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	waitNotifier(t, g)

	e, err := g.Service.Submit(t.Context(), gate.System, machine.Call{ToolCallID: "t1", ToolName: "deploy",
		CallerBotID: "bot-1", ConversationID: "c1", Arguments: json.RawMessage(`{"env":"prod"}`)})
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	card := next(t, cards, "the card")
	require.Equal(t, "/services/T/B/X", card.path)
	var c slackCard
	require.NoError(t, json.Unmarshal(card.body, &c), "%s", card.body)
	last := c.Blocks[len(c.Blocks)-1]
	require.Equal(t, "actions", last.Type, "%s", card.body)
	require.Len(t, last.Elements, 3, "%s", card.body)
	buttons := map[string]string{}
	for _, el := range last.Elements {
		assert.Empty(t, el.URL, "an interactive button is no link")
		assert.Equal(t, e.PendingID, el.Value)
		buttons[el.Text.Text] = el.ActionID
	}
	assert.Equal(t, map[string]string{"Approve": gate.SlackActionApprove, "Approve for session": gate.SlackActionApproveSession, "Reject": gate.SlackActionReject}, buttons)

	responseURL := responses.URL + "/actions/T/1/xyz"
	click := func(user, action string) string {
		p, err := json.Marshal(map[string]any{
			"type": "block_actions", "user": map[string]string{"id": user, "username": strings.ToLower(user)},
			"actions":      []map[string]string{{"action_id": action, "value": e.PendingID, "type": "button"}},
			"response_url": responseURL,
		})
		require.NoError(t, err)
		return url.Values{"payload": {string(p)}}.Encode()
	}
	send := func(body, ts, sig string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/integrations/slack/interactions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	signed := func(body, ts string) int { return send(body, ts, gate.SignSlack(slackSecret, ts, []byte(body))) }
	pending := func(what string) {
		t.Helper()
		cur, err := g.Service.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
		require.NoError(t, err)
		assert.Equal(t, machine.StatePendingApproval, cur.Status, what)
		select {
		case r := <-got:
			t.Errorf("%s: Slack was told %s %s", what, r.path, r.body)
		default:
		}
	}

	approve := click("U0ALICE", gate.SlackActionApprove)
	assert.Equal(t, 403, send(approve, now, gate.SignSlack("another-apps-secret", now, []byte(approve))), "signed with another secret")
	pending("a forged signature")
	assert.Equal(t, 403, send(approve, now, ""), "unsigned")
	pending("no signature")
	tampered := click("U0ALICE", gate.SlackActionReject)
	assert.Equal(t, 403, send(tampered, now, gate.SignSlack(slackSecret, now, []byte(approve))), "a body other than the one signed")
	pending("a tampered body")
	old := strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10)
	assert.Equal(t, 403, signed(approve, old), "signed six minutes ago: a replay")
	pending("an old timestamp")

	// Signed, but the user is not mapped: told so, alone; nothing changes.
	require.Equal(t, 200, signed(click("U0NOBODY", gate.SlackActionApprove), now))
	var r slackReply
	ans := next(t, got, "the answer to an unmapped user")
	assert.Equal(t, "/actions/T/1/xyz", ans.path)
	require.NoError(t, json.Unmarshal(ans.body, &r))
	assert.Equal(t, "ephemeral", r.ResponseType)
	assert.False(t, r.ReplaceOriginal)
	assert.Contains(t, r.Text, "not mapped to a toolgate approver")
	pending("an unmapped user")

	// Mapped, but not among the call's approvers.
	require.Equal(t, 200, signed(click("U0BOB", gate.SlackActionApprove), now))
	ans = next(t, got, "the answer to bob")
	r = slackReply{}
	require.NoError(t, json.Unmarshal(ans.body, &r))
	assert.Equal(t, "ephemeral", r.ResponseType)
	assert.Contains(t, r.Text, "bob is not among this call's approvers")
	pending("a mapped user who is no approver")

	// Alice approves for the session: decided as alice, the card replaced.
	session := click("U0ALICE", gate.SlackActionApproveSession)
	require.Equal(t, 200, signed(session, now))
	ans = next(t, got, "the card replaced")
	r = slackReply{}
	require.NoError(t, json.Unmarshal(ans.body, &r), "%s", ans.body)
	assert.True(t, r.ReplaceOriginal)
	assert.Empty(t, r.ResponseType)
	assert.Contains(t, r.Text, "deploy approved by alice (session)")
	assert.NotContains(t, string(ans.body), "toolgate_approve", "no buttons left")
	cur, err := g.Service.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, machine.StateApproved, cur.Status)
	assert.Equal(t, "alice", cur.ApprovedOrRejectedByUserID)
	assert.Equal(t, machine.ScopeSession, cur.DecisionScope)

	// The same click again (a stale card): already decided, by alice.
	require.Equal(t, 200, signed(session, now))
	ans = next(t, got, "the answer to the second click")
	assert.Equal(t, "/actions/T/1/xyz", ans.path)
	r = slackReply{}
	require.NoError(t, json.Unmarshal(ans.body, &r))
	assert.Equal(t, "ephemeral", r.ResponseType)
	assert.Contains(t, r.Text, "Already decided by alice")
	after, err := g.Service.Get(t.Context(), gate.System, wire.GetRequest{PendingID: e.PendingID})
	require.NoError(t, err)
	assert.Equal(t, cur.DecisionTime, after.DecisionTime, "decided once")
}

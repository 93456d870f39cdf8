package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// DecisionTokenIssuer issues the one-time decision tokens of a pending
// call, one to approve and one to reject, each deciding as approver.
// *gate.Service does, as toolgate itself (the server wires it); a call no
// longer pending is machine.ErrConflict.
type DecisionTokenIssuer interface {
	IssueDecisionTokens(ctx context.Context, pendingID, approver string) (approve, reject string, err error)
}

// DecisionTokenIssuerFunc adapts a function to a DecisionTokenIssuer.
type DecisionTokenIssuerFunc func(ctx context.Context, pendingID, approver string) (approve, reject string, err error)

// IssueDecisionTokens calls f.
func (f DecisionTokenIssuerFunc) IssueDecisionTokens(ctx context.Context, pendingID, approver string) (string, string, error) {
	return f(ctx, pendingID, approver)
}

// WithDecisionTokens makes the notifier put one-time decision links in
// the approval requests it sends to a webhook, ntfy or email channel that names
// an approver (and whose scope has an inboxUrl, the base of the links):
// tokens issues them.
func WithDecisionTokens(tokens DecisionTokenIssuer) NotifierOption {
	return func(n *Notifier) { n.tokens = tokens }
}

// DecisionTokenPath is where a decision token is redeemed (POST) or shown
// (GET), below a scope's inboxUrl.
const DecisionTokenPath = "/v1/decision-tokens/"

// Headers of a webhook delivery that carries decision links.
const (
	// HeaderDecisionApprove is a one-time link that approves the call: POST
	// to it with Content-Type application/json (the body is ignored).
	HeaderDecisionApprove = "X-Toolgate-Decision-Approve"
	// HeaderDecisionReject is the one-time link that rejects it.
	HeaderDecisionReject = "X-Toolgate-Decision-Reject"
)

// links are the one-time decision links of one delivery.
type links struct {
	approve, reject string
}

// decisionLinks issues the decision links of a delivery that asks for a
// decision on a channel that names its approver, or returns nil: for
// any other delivery, without an issuer or an inboxUrl, or for a call no
// longer pending (its request is news of the past: it goes without).
func (n *Notifier) decisionLinks(ctx context.Context, ch policy.Channel, inbox string, ev *wire.Event) (*links, error) {
	if n.tokens == nil || ch.Approver == "" || inbox == "" || ch.Type == policy.ChannelSlack {
		return nil, nil
	}
	if ev.Event != machine.EventAsk && ev.Event != machine.EventRemind && ev.Event != machine.EventEscalate {
		return nil, nil
	}
	approve, reject, err := n.tokens.IssueDecisionTokens(ctx, ev.Entry.PendingID, ch.Approver)
	if errors.Is(err, machine.ErrConflict) || errors.Is(err, machine.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("issue decision tokens: %w", err)
	}
	base := strings.TrimRight(inbox, "/") + DecisionTokenPath
	return &links{approve: base + approve, reject: base + reject}, nil
}

func (l *links) setHeaders(req *http.Request) {
	if l == nil || req == nil {
		return
	}
	req.Header.Set(HeaderDecisionApprove, l.approve)
	req.Header.Set(HeaderDecisionReject, l.reject)
}

// ntfyAction is one action of ntfy's JSON publishing format.
type ntfyAction struct {
	Action  string            `json:"action"`
	Label   string            `json:"label"`
	URL     string            `json:"url"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	Clear   bool              `json:"clear,omitempty"`
}

type ntfyJSON struct {
	Topic    string       `json:"topic"`
	Title    string       `json:"title"`
	Message  string       `json:"message"`
	Tags     []string     `json:"tags"`
	Priority int          `json:"priority"`
	Click    string       `json:"click,omitempty"`
	Actions  []ntfyAction `json:"actions"`
}

// ntfyJSONRequest publishes an approval request with decision links in
// ntfy's JSON format (POST to the server's root, the topic in the body),
// whose http actions say a method, headers and a body: Approve and Reject
// POST their one-time link from the phone, with the JSON content type
// toolgate's API takes, and the notification is cleared once one
// succeeds. View opens the call in the inbox.
func ntfyJSONRequest(ctx context.Context, ch policy.Channel, s summary, l *links) (*http.Request, error) {
	tags, priority := ntfyTags(s)
	prio, _ := strconv.Atoi(priority)
	post := func(label, url string) ntfyAction {
		return ntfyAction{Action: "http", Label: label, URL: url, Method: http.MethodPost,
			Headers: map[string]string{"Content-Type": "application/json"}, Body: "{}", Clear: true}
	}
	msg := ntfyJSON{
		Topic: ch.Topic, Title: oneLine(clip(s.headline, 250)), Message: ntfyMessage(s), Tags: []string{tags}, Priority: prio,
		Click:   s.link,
		Actions: []ntfyAction{post("Approve", l.approve), post("Reject", l.reject)},
	}
	if s.link != "" {
		msg.Actions = append(msg.Actions, ntfyAction{Action: "view", Label: "Open", URL: s.link})
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(ch.URL, "/"), bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("bad ntfy URL")
	}
	req.Header.Set("Content-Type", "application/json")
	if ch.Secret != "" {
		req.Header.Set("Authorization", "Bearer "+ch.Secret)
	}
	return req, nil
}

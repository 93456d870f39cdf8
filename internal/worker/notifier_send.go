package worker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Headers of a generic webhook delivery: Standard Webhooks' three
// (https://www.standardwebhooks.com), which its libraries verify, and
// toolgate's own.
const (
	// HeaderWebhookID is the delivery's id: the event's, <pendingId>:<revision>,
	// the same on every attempt, so a receiver de-duplicates by it.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp is when this attempt was made, in Unix
	// seconds. It is signed, so a receiver refuses a delivery replayed
	// later than its tolerance (the libraries': five minutes either way).
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature is "v1," and the base64 HMAC-SHA256 of
	// "<webhook-id>.<webhook-timestamp>.<body>", one per signing secret of
	// the channel, space-separated: SignWebhook. A receiver accepts a
	// delivery one of whose signatures its secret makes, so during a
	// rotation the old secret and the new both verify.
	HeaderWebhookSignature = "webhook-signature"
	// HeaderDelivery is the webhook-id again, under the name toolgate gave
	// it first.
	HeaderDelivery = "X-Toolgate-Delivery"
	// HeaderEvent is the event's subject, e.g. tool.approval_required.
	HeaderEvent = "X-Toolgate-Event"

	// HeaderSignature is the signature of deliveries before Standard
	// Webhooks, sent only to a channel with legacySignature: "sha256=" and
	// the hex HMAC-SHA256, keyed with the bytes of the channel's first
	// secret (whsec_ or not), of HeaderTimestamp's value, a ".", and the
	// body (SignLegacyWebhook).
	//
	// Deprecated: it goes in the next release; verify webhook-signature.
	HeaderSignature = "X-Toolgate-Signature"
	// HeaderTimestamp is the webhook-timestamp again, signed by
	// HeaderSignature; sent only with it.
	//
	// Deprecated: it goes with HeaderSignature.
	HeaderTimestamp = "X-Toolgate-Timestamp"
)

// SignWebhook returns the webhook-signature of a delivery: for each key,
// "v1," and the base64 HMAC-SHA256, keyed with it, of id + "." +
// timestamp + "." + body, the signatures separated by spaces. A key is
// what policy.WebhookKey makes of a secret.
func SignWebhook(keys [][]byte, id string, timestamp int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// SignLegacyWebhook returns the X-Toolgate-Signature of a delivery whose
// X-Toolgate-Timestamp is timestamp: "sha256=" and the hex HMAC-SHA256,
// keyed with secret, of timestamp + "." + body.
//
// Deprecated: the header goes in the next release; see SignWebhook.
func SignLegacyWebhook(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifyLegacyWebhook checks a delivery's X-Toolgate-Signature as its
// receiver should: the signature over the timestamp and the raw body,
// and, when tolerance is positive, that the timestamp is within tolerance
// of now.
//
// Deprecated: verify webhook-signature with a Standard Webhooks library.
func VerifyLegacyWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%s: want Unix seconds, got %q", HeaderTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); tolerance > 0 && (d > tolerance || d < -tolerance) {
		return fmt.Errorf("%s: %s off now, more than %s", HeaderTimestamp, d.Round(time.Second), tolerance)
	}
	if !hmac.Equal([]byte(h.Get(HeaderSignature)), []byte(SignLegacyWebhook(secret, ts, body))) {
		return fmt.Errorf("%s: does not match", HeaderSignature)
	}
	return nil
}

// sendError is a failed attempt, with what the response said about
// trying again.
type sendError struct {
	msg        string
	permanent  bool          // retrying cannot help
	retryAfter time.Duration // the receiver asked for this much patience
}

func (e *sendError) Error() string { return e.msg }

// send makes one attempt at delivering ev to ch. raw is the event as
// published, which a webhook gets verbatim.
func (n *Notifier) send(ctx context.Context, ch policy.Channel, inbox string, ev *wire.Event, raw []byte) error {
	// References (env:, file:) are resolved at each attempt, never kept:
	// a rotated secret applies to the next one. One that does not resolve
	// here is retried like a channel that is down, since a file may yet
	// appear, and dead-lettered in the end; the error names the
	// reference, not the value.
	ch, err := policy.ResolveChannel(ch)
	if err != nil {
		return &sendError{msg: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	links, err := n.decisionLinks(ctx, ch, inbox, ev)
	if err != nil {
		return &sendError{msg: err.Error()}
	}
	if ch.Type == policy.ChannelEmail {
		return n.sendEmail(ctx, ch, newSummary(ev, inbox), links, ev.ID)
	}
	var req *http.Request
	switch ch.Type {
	case policy.ChannelWebhook:
		req, err = n.webhookRequest(ctx, ch, ev, raw)
		links.setHeaders(req)
	case policy.ChannelSlack:
		req, err = slackRequest(ctx, ch, newSummary(ev, inbox), ch.SigningSecret != "")
	case policy.ChannelNtfy:
		if links != nil {
			req, err = ntfyJSONRequest(ctx, ch, newSummary(ev, inbox), links)
		} else {
			req, err = ntfyRequest(ctx, ch, newSummary(ev, inbox))
		}
	default:
		return &sendError{msg: fmt.Sprintf("unknown channel type %q", ch.Type), permanent: true}
	}
	if err != nil {
		return &sendError{msg: err.Error(), permanent: true}
	}
	req.Header.Set("User-Agent", "toolgate-notifier")
	resp, err := n.client.Do(req)
	if err != nil {
		// url.Error quotes the whole URL, and a Slack one is a secret.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &sendError{msg: fmt.Sprintf("POST %s: %v", redactURL(ch.URL), err)}
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16)) // let the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &sendError{msg: fmt.Sprintf("POST %s: %s: %s", redactURL(ch.URL), resp.Status, oneLine(string(excerpt)))}
	switch c := resp.StatusCode; {
	case c == http.StatusTooManyRequests || c == http.StatusServiceUnavailable:
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			e.retryAfter = time.Duration(s) * time.Second
		}
	case c == http.StatusRequestTimeout || c == http.StatusTooEarly:
	case c >= 400 && c < 500:
		e.permanent = true // refused as sent (a bad URL, a revoked hook, a wrong secret)
	}
	return e
}

// webhookRequest POSTs the wire.Event envelope, as published on
// TOOL_EVENTS, signed with every secret of the channel (resolved).
func (n *Notifier) webhookRequest(ctx context.Context, ch policy.Channel, ev *wire.Event, raw []byte) (*http.Request, error) {
	secrets := ch.SigningSecrets()
	if len(secrets) == 0 {
		return nil, errors.New("a webhook without a secret") // Validate refuses one
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := policy.WebhookKey(s)
		if err != nil {
			return nil, fmt.Errorf("secret: %w", err) // Validate and ResolveChannel refuse one
		}
		keys[i] = k
	}
	contentType := "application/json"
	if ch.Format == policy.FormatCloudEvents {
		r := n.engine.Resolve(ev.Entry.Team, ev.Entry.ConversationID)
		ce, err := wire.StructuredCloudEvent(ev, raw, r.InboxURL)
		if err != nil {
			return nil, fmt.Errorf("cloudevent: %w", err)
		}
		raw, contentType = ce, wire.CloudEventsContentType
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ch.URL, bytes.NewReader(raw))
	if err != nil {
		return nil, errors.New("bad webhook URL")
	}
	// The attempt's time, not the event's: a retry an hour later is no
	// replay, and a receiver's tolerance must not refuse it.
	ts := n.now().Unix()
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(HeaderEvent, ev.Type)
	req.Header.Set(HeaderDelivery, ev.ID)
	req.Header.Set(HeaderWebhookID, ev.ID)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderWebhookSignature, SignWebhook(keys, ev.ID, ts, raw))
	if ch.LegacySignature {
		req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(HeaderSignature, SignLegacyWebhook(secrets[0], strconv.FormatInt(ts, 10), raw))
	}
	return req, nil
}

// summary is what a human is told of one event, channel-neutral.
type summary struct {
	event        machine.Event
	pendingID    string
	tool         string
	description  string
	caller       string
	conversation string
	team         string
	cost         string    // estimated, as the agent gave it; "" for none
	deadline     time.Time // zero for none
	headline     string    // "Approval needed: web_search", "web_search approved by alice"
	reason       string
	link         string // the call in the inbox; "" without an inboxUrl
	approve      string
	reject       string
}

func newSummary(ev *wire.Event, inbox string) summary {
	e := ev.Entry
	s := summary{
		event: ev.Event, pendingID: e.PendingID, tool: e.ToolName, description: e.Description,
		caller: e.CallerBotID, conversation: e.ConversationID, team: e.Team, reason: ev.Reason,
	}
	if e.EstimatedCost > 0 {
		s.cost = strconv.FormatFloat(e.EstimatedCost, 'f', -1, 64)
	}
	if e.ApprovalTimeoutAt > 0 {
		s.deadline = time.UnixMilli(e.ApprovalTimeoutAt).UTC()
	}
	if s.description == "" {
		s.description = e.ToolName
	}
	if inbox != "" {
		s.link = strings.TrimRight(inbox, "/") + "/#/calls/" + url.PathEscape(e.PendingID)
		s.approve = s.link + "?decision=approve"
		s.reject = s.link + "?decision=reject"
	}
	by := e.ApprovedOrRejectedByUserID
	if by == "" {
		by = ev.Actor
	}
	switch ev.Event {
	case machine.EventAsk:
		s.headline = "Approval needed: " + s.tool
	case machine.EventApprove:
		s.headline = s.tool + " approved by " + by
		if e.DecisionScope == machine.ScopeSession || e.DecisionScope == machine.ScopeAlways {
			s.headline += " (" + string(e.DecisionScope) + ")"
		}
	case machine.EventVote:
		s.headline = s.tool + ": " + ev.Reason
	case machine.EventReject:
		s.headline = s.tool + " rejected by " + by
	case machine.EventEscalate:
		who := "any approver"
		if d := e.Deciders(); d != nil {
			who = strings.Join(d, ", ")
		}
		s.headline = "Escalated: " + s.tool + " still needs a decision (" + who + " may decide)"
	case machine.EventTimeout:
		s.headline = s.tool + " rejected: nobody decided in time"
	case machine.EventOverdue:
		s.headline = s.tool + " is past its deadline and still waiting"
	case machine.EventRemind:
		s.headline = "Reminder: " + s.tool + " still needs a decision"
	case machine.EventCancel:
		s.headline = s.tool + " cancelled"
		if ev.Actor != "" {
			s.headline += " by " + ev.Actor
		}
	case machine.EventRespond:
		s.headline = s.tool + " answered by " + by + " (the tool did not run)"
	case machine.EventFail:
		s.headline = "Result unknown: " + s.tool + " may have run, and its executor was lost (toolgate retry " + e.PendingID + " runs it again)"
	default:
		s.headline = s.tool + ": " + string(ev.Event)
	}
	return s
}

// waiting reports whether the call still waits for a decision, so the
// message should offer one.
func (s summary) waiting() bool {
	switch s.event {
	case machine.EventAsk, machine.EventOverdue, machine.EventRemind, machine.EventVote, machine.EventEscalate:
		return true
	}
	return false
}

func (s summary) deadlineText() string {
	if s.deadline.IsZero() {
		return "none"
	}
	return s.deadline.Format("2006-01-02 15:04:05 UTC")
}

func (s summary) costText() string {
	if s.cost == "" {
		return "not given"
	}
	return s.cost
}

// slackRequest posts to a Slack incoming webhook: blocks for the card and
// text as the fallback (what notifications and old clients show).
// Incoming webhooks cannot edit what they posted, so a decision is a
// short message of its own; a click on an interactive card's button
// replaces the card (through Slack's response_url, see gate.Slack.Interaction).
func slackRequest(ctx context.Context, ch policy.Channel, s summary, interactive bool) (*http.Request, error) {
	body, err := json.Marshal(slackMessage(s, interactive))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ch.URL, bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("bad Slack URL")
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

type slackText struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji bool   `json:"emoji,omitempty"`
}

type slackBlock struct {
	Type     string         `json:"type"`
	Text     *slackText     `json:"text,omitempty"`
	Fields   []slackText    `json:"fields,omitempty"`
	Elements []slackElement `json:"elements,omitempty"`
}

type slackElement struct {
	Type  string     `json:"type"`
	Text  *slackText `json:"text,omitempty"`
	URL   string     `json:"url,omitempty"`
	Style string     `json:"style,omitempty"`
	// ActionID tells the buttons apart if the Slack app has interactivity on.
	ActionID string `json:"action_id,omitempty"`
	// Value is an interactive button's pendingId.
	Value string `json:"value,omitempty"`
}

type slackPayload struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

// slackMessage is the message of s. An interactive card (a channel with
// the Slack app's signing secret) has buttons that decide in Slack, each
// carrying the call's pendingId; otherwise they link to the inbox.
func slackMessage(s summary, interactive bool) slackPayload {
	mrkdwn := func(t string) *slackText { return &slackText{Type: "mrkdwn", Text: clip(t, 3000)} }
	if !s.waiting() {
		line := "*" + slackEscape(s.headline) + "*"
		if s.reason != "" {
			line += ": " + slackEscape(s.reason)
		}
		line += "\n" + slackEscape(s.description)
		if s.link != "" {
			line += "\n<" + s.link + "|View in the inbox>"
		}
		return slackPayload{
			Text:   clip(s.headline+": "+s.description, 3000),
			Blocks: []slackBlock{{Type: "section", Text: mrkdwn(line)}},
		}
	}
	deadline := s.deadlineText()
	if !s.deadline.IsZero() {
		// Slack shows the reader's local time, the text is the fallback.
		deadline = fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", s.deadline.Unix(), deadline)
	}
	fields := []slackText{
		{Type: "mrkdwn", Text: "*Tool*\n`" + slackEscape(s.tool) + "`"},
		{Type: "mrkdwn", Text: "*Caller*\n" + clip(slackEscape(s.caller), 1900)},
		{Type: "mrkdwn", Text: "*Conversation*\n" + clip(slackEscape(s.conversation), 1900)},
		{Type: "mrkdwn", Text: "*Estimated cost*\n" + s.costText()},
		{Type: "mrkdwn", Text: "*Deadline*\n" + deadline},
	}
	if s.team != "" {
		fields = append(fields, slackText{Type: "mrkdwn", Text: "*Team*\n" + clip(slackEscape(s.team), 1900)})
	}
	blocks := []slackBlock{
		{Type: "header", Text: &slackText{Type: "plain_text", Text: clip(s.headline, 150), Emoji: true}},
		{Type: "section", Text: mrkdwn(slackEscape(s.description))},
		{Type: "section", Fields: fields},
	}
	text := fmt.Sprintf("%s: %s (caller %s, conversation %s, estimated cost %s, deadline %s)",
		s.headline, s.description, s.caller, s.conversation, s.costText(), s.deadlineText())
	if interactive {
		button := func(label, style, action string) slackElement {
			return slackElement{Type: "button", Text: &slackText{Type: "plain_text", Text: label}, Style: style, ActionID: action, Value: s.pendingID}
		}
		elems := []slackElement{
			button("Approve", "primary", "toolgate_approve"),
			button("Approve for session", "", "toolgate_approve_session"),
			button("Reject", "danger", "toolgate_reject"),
		}
		if s.link != "" {
			elems = append(elems, slackElement{Type: "button", Text: &slackText{Type: "plain_text", Text: "Open in the inbox"}, URL: s.link, ActionID: "toolgate_view"})
			text += " " + s.link
		}
		blocks = append(blocks, slackBlock{Type: "actions", Elements: elems})
	} else if s.link != "" {
		blocks = append(blocks, slackBlock{Type: "actions", Elements: []slackElement{
			{Type: "button", Text: &slackText{Type: "plain_text", Text: "Approve"}, URL: s.approve, Style: "primary", ActionID: "toolgate_approve"},
			{Type: "button", Text: &slackText{Type: "plain_text", Text: "Reject"}, URL: s.reject, Style: "danger", ActionID: "toolgate_reject"},
		}})
		text += " approve: " + s.approve + " reject: " + s.reject
	}
	return slackPayload{Text: clip(text, 3000), Blocks: blocks}
}

// slackEscape escapes what Slack's mrkdwn reads as markup of its own.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// ntfyRequest publishes to <url>/<topic>: the message in the body, the rest
// in headers. Its actions are view actions, links to the inbox, where the
// human signs in to decide; a channel with an approver gets one-time
// decision links instead (ntfyJSONRequest). A channel's secret, if any,
// is sent as an ntfy access token.
func ntfyRequest(ctx context.Context, ch policy.Channel, s summary) (*http.Request, error) {
	u := strings.TrimRight(ch.URL, "/") + "/" + ch.Topic
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(ntfyMessage(s)))
	if err != nil {
		return nil, errors.New("bad ntfy URL")
	}
	tags, priority := ntfyTags(s)
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	req.Header.Set("Title", headerText(s.headline))
	req.Header.Set("Tags", tags)
	req.Header.Set("Priority", priority)
	if s.link != "" {
		req.Header.Set("Click", s.link)
		if s.waiting() {
			req.Header.Set("Actions", "view, Approve, "+s.approve+"; view, Reject, "+s.reject)
		}
	}
	if ch.Secret != "" {
		req.Header.Set("Authorization", "Bearer "+ch.Secret)
	}
	return req, nil
}

// ntfyMessage is an ntfy notification's body.
func ntfyMessage(s summary) string {
	var b strings.Builder
	b.WriteString(s.description)
	if s.reason != "" && !s.waiting() {
		b.WriteString("\nReason: " + s.reason)
	}
	fmt.Fprintf(&b, "\nCaller: %s\nConversation: %s", s.caller, s.conversation)
	if s.team != "" {
		fmt.Fprintf(&b, "\nTeam: %s", s.team)
	}
	if s.waiting() {
		fmt.Fprintf(&b, "\nEstimated cost: %s\nDeadline: %s", s.costText(), s.deadlineText())
	}
	return b.String()
}

// ntfyTags are an ntfy notification's tags (emoji) and priority.
func ntfyTags(s summary) (tags, priority string) {
	tags, priority = "bell", "4"
	switch s.event {
	case machine.EventApprove:
		tags, priority = "white_check_mark", "3"
	case machine.EventReject:
		tags, priority = "x", "3"
	case machine.EventTimeout:
		tags, priority = "hourglass", "3"
	case machine.EventOverdue, machine.EventRemind, machine.EventEscalate:
		tags = "hourglass"
	case machine.EventVote:
		tags, priority = "ballot_box_with_check", "3"
	case machine.EventCancel:
		tags, priority = "no_entry_sign", "3"
	}
	return tags, priority
}

// headerText makes s one header line: no line breaks, and RFC 2047 encoded
// if it is not ASCII (ntfy decodes it).
func headerText(s string) string {
	return mime.QEncoding.Encode("utf-8", oneLine(clip(s, 250)))
}

// redactURL keeps a URL's scheme and host: its path and query may be the
// secret (a Slack webhook's are).
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(url)"
	}
	return p.Scheme + "://" + p.Host + "/…"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
)

// slackInteractionsPath is the Slack app's Interactivity Request URL: where
// Slack POSTs the clicks on a card's buttons.
const slackInteractionsPath = "/v1/integrations/slack/interactions"

// slackAnswerTimeout bounds the POST to a click's response_url: Slack
// wants the click answered within 3 seconds.
const slackAnswerTimeout = 2 * time.Second

// slackInteraction hands a click to the application layer, which checks
// its signature, maps the user and decides, and tells Slack what came of
// it through the payload's response_url: the card replaced by the
// outcome, or a message only the clicking user sees. The click itself is
// answered 200 with no body, as Slack asks.
func (s *Server) slackInteraction(w http.ResponseWriter, r *http.Request, _ User) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return httpErr(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body over %d bytes", maxBody))
	}
	out, err := s.cfg.Gate.Slack().Interaction(r.Context(), gate.SlackRequest{
		Body: body, Timestamp: r.Header.Get("X-Slack-Request-Timestamp"), Signature: r.Header.Get("X-Slack-Signature"),
	})
	if err != nil {
		return err
	}
	if msg := slackAnswer(out); msg != nil {
		if err := s.answerSlack(r.Context(), out.ResponseURL, msg); err != nil && s.cfg.Log != nil {
			s.cfg.Log.Warn("slack: answering a click through its response_url failed", "err", err)
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// slackReply is a message posted to a response_url.
type slackReply struct {
	ResponseType    string           `json:"response_type,omitempty"`
	ReplaceOriginal bool             `json:"replace_original"`
	Text            string           `json:"text"`
	Blocks          []map[string]any `json:"blocks,omitempty"`
}

func slackAnswer(out gate.SlackOutcome) *slackReply {
	switch {
	case out.Decided != nil:
		e := out.Decided
		line := slackOutcome(e)
		desc := e.Description
		if desc == "" {
			desc = e.ToolName
		}
		return &slackReply{ReplaceOriginal: true, Text: line + ": " + desc, Blocks: []map[string]any{{
			"type": "section",
			"text": map[string]string{"type": "mrkdwn", "text": "*" + slackEscape(line) + "*\n" + slackEscape(desc) +
				"\nCaller: " + slackEscape(e.CallerBotID) + ", conversation: " + slackEscape(e.ConversationID)},
		}}}
	case out.Ephemeral != "":
		return &slackReply{ResponseType: "ephemeral", Text: out.Ephemeral}
	}
	return nil
}

// slackOutcome is the line that replaces a decided card's buttons.
func slackOutcome(e *machine.Entry) string {
	by := e.ApprovedOrRejectedByUserID
	switch e.Status {
	case machine.StateRejectedByUser:
		return e.ToolName + " rejected by " + by
	case machine.StatePendingApproval:
		return e.ToolName + " waits for a decision"
	}
	line := e.ToolName + " approved by " + by
	if e.DecisionScope == machine.ScopeSession || e.DecisionScope == machine.ScopeAlways {
		line += " (" + string(e.DecisionScope) + ")"
	}
	return line
}

func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// answerSlack POSTs msg to a click's response_url, which must be Slack's
// (SlackResponseURL).
func (s *Server) answerSlack(ctx context.Context, responseURL string, msg *slackReply) error {
	u, err := url.Parse(responseURL)
	if err != nil || responseURL == "" {
		return errors.New("the payload has no response_url")
	}
	allowed := s.cfg.SlackResponseURL
	if allowed == nil {
		allowed = func(u *url.URL) bool { return u.Scheme == "https" && u.Host == "hooks.slack.com" }
	}
	if !allowed(u) {
		return fmt.Errorf("response_url %s://%s/…: not Slack's", u.Scheme, u.Host)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	// Not the click's context: an answer begun is finished even if Slack
	// hung up on the click.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slackAnswerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	client := s.cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is a credential for the card
		}
		return fmt.Errorf("POST response_url: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST response_url: %s", resp.Status)
	}
	return nil
}

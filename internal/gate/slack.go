package gate

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// A Slack channel with its app's signing secret sends cards whose
// buttons decide in Slack: Slack POSTs each click to toolgate's
// interactivity endpoint, signed with that secret, and the click decides
// as the toolgate identity the channel's slackUsers map the clicking
// Slack user to. The signature is the click's credential, as a token is
// a request's: a click that no Slack channel's secret signed, or signed
// more than five minutes ago, changes nothing.

// The action ids of a card's buttons; each button's value is the call's
// pendingId.
const (
	SlackActionApprove        = "toolgate_approve"
	SlackActionApproveSession = "toolgate_approve_session"
	SlackActionReject         = "toolgate_reject"
)

// SlackTolerance is how far a click's X-Slack-Request-Timestamp may be
// from now, either way: Slack's advice, so that a captured click cannot
// be replayed later.
const SlackTolerance = 5 * time.Minute

// SlackRequest is a request to the interactivity endpoint as it came:
// the raw body (which is signed) and the two headers that sign it.
type SlackRequest struct {
	Body      []byte
	Timestamp string // X-Slack-Request-Timestamp, Unix seconds
	Signature string // X-Slack-Signature, "v0=" and hex HMAC-SHA256
}

// SlackOutcome is what a click did, for the transport to tell Slack
// through the payload's response_url.
type SlackOutcome struct {
	ResponseURL string
	// Decided is the call the click decided, to replace the card with its
	// outcome; nil when it decided nothing.
	Decided *machine.Entry
	// Ephemeral is a message for the clicking user alone (why nothing
	// changed); "" when there is none.
	Ephemeral string
}

// SignSlack returns the X-Slack-Signature of a request Slack signs with
// secret: "v0=" and the hex HMAC-SHA256 of "v0:<timestamp>:<body>".
func SignSlack(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// slackPayload is what of a block_actions payload toolgate reads.
type slackPayload struct {
	Type string `json:"type"`
	User struct {
		ID       string `json:"id"`
		Username string `json:"username"`
	} `json:"user"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
	ResponseURL string `json:"response_url"`
}

// Slack is the decisions made in Slack, through its interactivity
// endpoint. A click's signature is its credential, so no actor a
// transport authenticated comes with it: a click is no use case of the
// Service.
type Slack struct{ s *Service }

// Slack returns the Slack interactions of the calls s serves.
func (s *Service) Slack() Slack { return Slack{s: s} }

// Interaction handles a click on a card's button: it checks the
// request's signature against every Slack channel's signing secret in the
// policy and its timestamp, maps the clicking user through the channels
// whose secret signed it, and decides the call as that identity (once:
// a second click is told who decided). A request not signed by a
// channel's secret, or too old, is refused (machine.ErrForbidden) and
// changes nothing; an unmapped user is answered, ephemerally, that they
// are not mapped, and nothing changes.
func (sl Slack) Interaction(ctx context.Context, r SlackRequest) (SlackOutcome, error) {
	s := sl.s
	sec, err := strconv.ParseInt(r.Timestamp, 10, 64)
	if err != nil {
		return SlackOutcome{}, fmt.Errorf("%w: X-Slack-Request-Timestamp: want Unix seconds, got %q", machine.ErrForbidden, clip(r.Timestamp, 41))
	}
	if d := s.now().Sub(time.Unix(sec, 0)); d > SlackTolerance || d < -SlackTolerance {
		return SlackOutcome{}, fmt.Errorf("%w: X-Slack-Request-Timestamp: %s off now, more than %s: a replay, or a clock astray", machine.ErrForbidden, d.Round(time.Second), SlackTolerance)
	}
	doc, _, err := s.policies.Get(ctx)
	if err != nil {
		return SlackOutcome{}, err
	}
	signers := s.slackSigners(doc, r)
	if len(signers) == 0 {
		return SlackOutcome{}, fmt.Errorf("%w: X-Slack-Signature: not made by the signing secret of any Slack channel in the policy", machine.ErrForbidden)
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return SlackOutcome{}, fmt.Errorf("%w: body: want a form with payload: %v", machine.ErrInvalid, err)
	}
	var p slackPayload
	if err := json.Unmarshal([]byte(form.Get("payload")), &p); err != nil {
		return SlackOutcome{}, fmt.Errorf("%w: payload: %v", machine.ErrInvalid, err)
	}
	out := SlackOutcome{ResponseURL: p.ResponseURL}
	if p.Type != "block_actions" || len(p.Actions) != 1 {
		return out, nil // not a button of toolgate's: nothing to do
	}
	act := p.Actions[0]
	d := machine.Decision{Reason: "decided in Slack"}
	switch act.ActionID {
	case SlackActionApprove:
		d.Approve = true
	case SlackActionApproveSession:
		d.Approve, d.Scope = true, machine.ScopeSession
	case SlackActionReject:
	default:
		return out, nil // the card's link to the inbox, say
	}
	var who string
	for _, ch := range signers {
		if u, ok := ch.SlackUser(p.User.ID); ok {
			who = u
			break
		}
	}
	if who == "" {
		out.Ephemeral = fmt.Sprintf("You (<@%s>) are not mapped to a toolgate approver, so nothing was decided: an admin maps Slack users in the Slack channel's slackUsers.", p.User.ID)
		return out, nil
	}
	// A decision repeated by its approver is no error to Decide (a retry
	// of a request whose answer was lost); a click on a card decided
	// already is told who decided.
	if cur, _, err := s.calls.Get(ctx, act.Value); err == nil && cur.Status != machine.StatePendingApproval {
		out.Ephemeral = alreadyDecided(cur)
		return out, nil
	}
	a := Actor{Name: who, Roles: []wire.Role{wire.RoleApprover}}
	e, err := s.decide(ctx, a, act.Value, d)
	var te *machine.TransitionError
	switch {
	case err == nil:
		out.Decided = e
	case errors.As(err, &te) && te.Entry != nil:
		out.Ephemeral = alreadyDecided(te.Entry)
	case errors.Is(err, machine.ErrForbidden), errors.Is(err, machine.ErrConflict), errors.Is(err, machine.ErrNotFound), errors.Is(err, machine.ErrInvalid):
		out.Ephemeral = "Nothing decided: " + err.Error()
	default:
		return SlackOutcome{}, err
	}
	return out, nil
}

// slackSigners are the Slack channels of doc (every scope's) whose
// signing secret made r's signature.
func (s *Service) slackSigners(doc *policy.Document, r SlackRequest) []policy.Channel {
	var scopes []*policy.Policy
	scopes = append(scopes, doc.Default)
	for _, p := range doc.Teams {
		scopes = append(scopes, p)
	}
	for _, p := range doc.Conversations {
		scopes = append(scopes, p)
	}
	var out []policy.Channel
	for _, p := range scopes {
		if p == nil {
			continue
		}
		for _, ch := range p.Notify {
			if ch.Type != policy.ChannelSlack || ch.SigningSecret == "" {
				continue
			}
			secret, err := policy.ResolveSecret(ch.SigningSecret)
			if err != nil {
				s.log.Warn("slack: a channel's signing secret does not resolve", "err", err)
				continue
			}
			if hmac.Equal([]byte(r.Signature), []byte(SignSlack(secret, r.Timestamp, r.Body))) {
				out = append(out, ch)
			}
		}
	}
	return out
}

// alreadyDecided tells a click why a call it would decide is not pending.
func alreadyDecided(e *machine.Entry) string {
	if by := e.ApprovedOrRejectedByUserID; by != "" {
		return fmt.Sprintf("Already decided by %s: %s.", by, stateWords(e.Status))
	}
	return fmt.Sprintf("Nothing decided: the call is %s.", stateWords(e.Status))
}

// stateWords says a call's state for a human.
func stateWords(st machine.State) string {
	switch st {
	case machine.StateApproved:
		return "approved"
	case machine.StateRejectedByUser:
		return "rejected"
	case machine.StateRejectedByTimeout:
		return "rejected, nobody decided in time"
	case machine.StateCancelled:
		return "cancelled"
	}
	return strings.ToLower(strings.ReplaceAll(string(st), "_", " "))
}

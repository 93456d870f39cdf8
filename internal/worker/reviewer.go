package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// ReviewerDurable is the consumer on TOOL_EVENTS that every Reviewer
// process shares, so that each asked call is reviewed once.
const ReviewerDurable = "reviewer"

// ReviewGate is the application layer as the reviewer role reaches it:
// gate.Service's ReviewCall and Review, with the role's own actor.
type ReviewGate interface {
	ReviewCall(ctx context.Context, r wire.ReviewCallRequest) (*wire.ReviewRequest, error)
	Review(ctx context.Context, r wire.ReviewDecision) (*wire.ReviewReply, error)
}

// ReviewerCounter is told of every reviewer's answer (metrics.Reviewer*
// answers). *metrics.ReviewerAnswers is one.
type ReviewerCounter interface {
	ReviewerAnswer(reviewer, answer string)
}

// Reviewer sends each asked call to the automated reviewers its policy
// names (reviewers:) whose match covers it, and hands their answers to
// the application layer, which records them (or refuses an approval
// beyond the reviewer's reach). It reads tool.approval_required through
// one durable consumer every process shares, so each ask is reviewed
// once (at least once: a process that dies mid-review leaves the event
// to another, and a second answer on a decided call is refused).
//
// A reviewer is sent the call as ReviewCall shows it (masked, with the
// conversation's latest calls), as a POST signed as a webhook's
// deliveries are (webhook-id <pendingId>:<revision>:<reviewer>,
// webhook-timestamp, webhook-signature with its secret) or as a NATS
// request on its subject, and has its timeoutMs to answer. No answer in
// time, an unreachable reviewer, an error status or an answer that is
// none counts as timeout, error or invalid and leaves the call to
// humans, as an abstention does: a reviewer never lets a call run by
// failing. The reviewers of a call are asked in the policy's order until
// one decides it.
type Reviewer struct {
	conn    *bus.Conn
	engine  *policy.Engine
	gate    ReviewGate
	counter ReviewerCounter
	log     *slog.Logger
	client  *http.Client
	now     func() time.Time
}

// NewReviewer returns a Reviewer that finds each call's reviewers with
// engine, which its caller keeps current, and acts through g. counter may
// be nil.
func NewReviewer(conn *bus.Conn, engine *policy.Engine, g ReviewGate, counter ReviewerCounter, log *slog.Logger) *Reviewer {
	return &Reviewer{conn: conn, engine: engine, gate: g, counter: counter, log: log, client: &http.Client{}, now: time.Now}
}

// Run reviews until ctx ends.
func (r *Reviewer) Run(ctx context.Context) error { return r.runner().Run(ctx) }

// CreateConsumer creates the reviewers' consumer of the asks, or brings
// it up to date, as Run does when it starts. The consumer delivers only
// what comes after it: a process creates it before it serves, so that
// no call asked from then on goes unreviewed.
func (r *Reviewer) CreateConsumer(ctx context.Context) error {
	_, err := r.runner().CreateConsumer(ctx)
	return err
}

func (r *Reviewer) runner() *consumer.Runner {
	return consumer.NewRunner(r.conn.JetStream(), consumer.ConsumerConfig{
		Stream:         wire.EventsStream,
		Durable:        ReviewerDurable,
		Description:    "toolgate reviewer: asked calls, sent to the policy's automated reviewers",
		FilterSubjects: []string{wire.SubjectApprovalRequired},
		// A new reviewer role reviews what is asked from now on.
		DeliverNew: true,
		MaxDeliver: 3,
		// Each review waits on its reviewers, at most a minute each:
		// many at once, so that one slow reviewer holds up no other call.
		Concurrency:   32,
		MaxAckPending: 256,
	}, r.log, r.review)
}

// review sends one asked call to its reviewers.
func (r *Reviewer) review(ctx context.Context, msg consumer.Msg) error {
	var ev wire.Event
	if err := wire.Unmarshal(msg.Data(), &ev); err != nil || ev.Entry == nil || ev.ID == "" {
		return consumer.Permanent(fmt.Errorf("reviewer: undecodable event (err %v)", err))
	}
	if ev.Event != machine.EventAsk {
		return nil
	}
	for _, rv := range r.engine.Resolve(ev.Entry.Team, ev.Entry.ConversationID).Reviewers {
		done, err := r.ask(ctx, ev.ID, ev.Entry.PendingID, rv)
		if done || err != nil {
			return err
		}
	}
	return nil
}

// ask has one reviewer review a call, and reports whether the call is
// no longer pending (decided, by it or anyone).
func (r *Reviewer) ask(ctx context.Context, eventID, pendingID string, rv policy.CompiledReviewer) (bool, error) {
	log := r.log.With("pendingId", pendingID, "reviewer", rv.Name)
	req, err := r.gate.ReviewCall(ctx, wire.ReviewCallRequest{PendingID: pendingID, Reviewer: rv.Name})
	switch {
	case errors.Is(err, machine.ErrConflict):
		return true, nil // decided, cancelled or timed out meanwhile
	case errors.Is(err, machine.ErrForbidden):
		return false, nil // its match does not cover the call
	case err != nil:
		return false, fmt.Errorf("reviewer %s: %w", rv.Name, err)
	}
	answer, label := r.call(ctx, eventID, rv, req, log)
	r.count(rv.Name, label)
	if answer.Decision == machine.ReviewAbstain {
		return false, nil
	}
	reply, err := r.gate.Review(ctx, wire.ReviewDecision{PendingID: pendingID, Reviewer: rv.Name, Answer: answer})
	switch {
	case errors.Is(err, machine.ErrConflict):
		return true, nil
	case err != nil:
		// The call stays pending, for humans: never fail open.
		log.Warn("reviewer: its answer could not be recorded", "answer", answer.Decision, "err", err)
		return false, nil
	}
	if reply.Outcome == wire.ReviewRefused {
		log.Info("reviewer: approval refused; the call is left to humans", "why", reply.Refused)
	}
	return reply.Outcome == wire.ReviewApproved || reply.Outcome == wire.ReviewRejected, nil
}

// call sends req to rv and returns its answer, checked, and the label
// it is counted under; a reviewer that gave none abstains.
func (r *Reviewer) call(ctx context.Context, eventID string, rv policy.CompiledReviewer, req *wire.ReviewRequest, log *slog.Logger) (wire.ReviewAnswer, string) {
	abstain := wire.ReviewAnswer{Decision: machine.ReviewAbstain}
	ctx, cancel := context.WithTimeout(ctx, rv.Timeout)
	defer cancel()
	req.Deadline = r.now().Add(rv.Timeout).UnixMilli()
	body, err := json.Marshal(req)
	if err != nil {
		log.Error("reviewer: request not encodable", "err", err)
		return abstain, metrics.ReviewerError
	}
	id := eventID + ":" + rv.Name
	var raw []byte
	if rv.NATS != "" {
		raw, err = r.requestNATS(ctx, rv, id, body)
	} else {
		raw, err = r.requestHTTP(ctx, rv, id, body)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		log.Info("reviewer: no answer in time; the call is left to humans", "timeout", rv.Timeout)
		return abstain, metrics.ReviewerTimeout
	case err != nil:
		log.Warn("reviewer: no answer; the call is left to humans", "err", err)
		return abstain, metrics.ReviewerError
	}
	var answer wire.ReviewAnswer
	if err := json.Unmarshal(raw, &answer); err != nil {
		log.Warn("reviewer: its answer is not JSON; the call is left to humans", "err", err)
		return abstain, metrics.ReviewerInvalid
	}
	if err := answer.Check(); err != nil {
		log.Warn("reviewer: its answer is no answer; the call is left to humans", "err", err)
		return abstain, metrics.ReviewerInvalid
	}
	return answer, answer.Decision
}

// requestHTTP POSTs body to rv's URL, signed with its secret, and
// returns the answer's body (at most wire.MaxReviewAnswer bytes).
func (r *Reviewer) requestHTTP(ctx context.Context, rv policy.CompiledReviewer, id string, body []byte) ([]byte, error) {
	res, err := policy.ResolveReviewer(rv)
	if err != nil {
		return nil, err
	}
	key, err := policy.WebhookKey(res.Secret)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, res.URL, bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("bad reviewer URL")
	}
	ts := r.now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderWebhookID, id)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderWebhookSignature, SignWebhook([][]byte{key}, id, ts, body))
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, errors.New(redactURLError(err, res.URL))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxReviewAnswer+1))
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode/100 != 2:
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	case len(raw) > wire.MaxReviewAnswer:
		return nil, fmt.Errorf("an answer over %d bytes", wire.MaxReviewAnswer)
	}
	return raw, nil
}

// requestNATS asks rv's subject on toolgate's own connection.
func (r *Reviewer) requestNATS(ctx context.Context, rv policy.CompiledReviewer, id string, body []byte) ([]byte, error) {
	data, err := r.conn.Request(ctx, rv.NATS, body, map[string][]string{HeaderWebhookID: {id}})
	if err != nil {
		return nil, err
	}
	if len(data) > wire.MaxReviewAnswer {
		return nil, fmt.Errorf("an answer over %d bytes", wire.MaxReviewAnswer)
	}
	return data, nil
}

// redactURLError is err without the URL it quotes, which may be a
// secret given by reference.
func redactURLError(err error, u string) string {
	return string(bytes.ReplaceAll([]byte(err.Error()), []byte(u), []byte(redactURL(u))))
}

func (r *Reviewer) count(reviewer, answer string) {
	if r.counter != nil {
		r.counter.ReviewerAnswer(reviewer, answer)
	}
}

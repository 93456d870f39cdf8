package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// DefaultRequestTimeout bounds a request whose context has no deadline. It
// is a little longer than the 30 seconds toolgate gives a request, so that
// toolgate's own answer (even "internal error") arrives first.
const DefaultRequestTimeout = 35 * time.Second

// Client talks to toolgate over one NATS connection. It is safe for
// concurrent use; it does not own the connection, which the caller closes.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
	// unavailable is how long a request that may be repeated is tried
	// again while nothing answers it.
	unavailable time.Duration
	denials     denials
	// submitted are the calls submitted lately, for Await's
	// read-your-writes.
	submitted recentSubmits
	// connectWait is how long a request made while the connection is
	// down waits for it (WithConnectWait); 0 sends it anyway.
	connectWait time.Duration
	// caller is the name toolgate knows this client's credential by,
	// learned from the first submit it answered: the subject of its
	// calls' revisions (wire.EntrySubject).
	caller atomic.Pointer[string]
}

// Option configures a Client.
type Option func(*Client)

// WithRequestTimeout sets how long a request waits for toolgate when its
// context has no deadline (default DefaultRequestTimeout).
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithUnavailableWait sets how long a request that is safe to repeat
// (submit, get, list) is tried again while toolgate does not answer
// (default DefaultUnavailableWait): a restart or a leader election takes
// seconds, and an agent should not fail for them. 0 tries once.
func WithUnavailableWait(d time.Duration) Option {
	return func(c *Client) { c.unavailable = max(d, 0) }
}

// WithConnectWait makes a request made while the client's connection is
// down (nats.go still making its first connection, or reconnecting) wait
// up to d for it to come back, and then fail at once with an error that
// matches ErrUnavailable and says toolgate is unreachable at the
// connection's URL, instead of being buffered until its timeout. For a
// process that stays up across toolgate's outages, such as an MCP
// server, that answers every request while toolgate is down. 0 (the
// default) sends the request anyway.
func WithConnectWait(d time.Duration) Option {
	return func(c *Client) { c.connectWait = max(d, 0) }
}

// DefaultUnavailableWait is how long a repeatable request is tried again
// while toolgate does not answer.
const DefaultUnavailableWait = 10 * time.Second

// attemptTimeout bounds one attempt of a repeatable request, so that a
// request lost in a server's death is sent again within the caller's
// deadline instead of waiting it out.
const attemptTimeout = 5 * time.Second

// New returns a client over nc. It does no I/O, so an agent may start
// before toolgate does.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: nil NATS connection")
	}
	c := &Client{nc: nc, timeout: DefaultRequestTimeout, unavailable: DefaultUnavailableWait}
	c.denials.watch(nc)
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// request sends body to an endpoint and decodes the reply into out. A
// refusal comes back as the *wire.APIError it carries, which matches the
// machine package's errors with errors.Is.
func (c *Client) request(ctx context.Context, endpoint string, body, out any) error {
	_, err := c.requestMsg(ctx, endpoint, body, out)
	return err
}

// repeatable are the endpoints a request may be sent to again when its
// answer did not come: asking twice does what asking once does (a
// decision, by its requestId).
var repeatable = map[string]bool{
	wire.EndpointSubmit: true, wire.EndpointGet: true, wire.EndpointList: true, wire.EndpointDecide: true,
	wire.EndpointBudgets: true, wire.EndpointRateLimits: true, wire.EndpointAnalytics: true, wire.EndpointPolicyGet: true, wire.EndpointDeniedTools: true,
	wire.EndpointGrantsPreview: true, wire.EndpointReceipts: true, wire.EndpointReceiptsKey: true,
	wire.EndpointPolicyDryRun: true, wire.EndpointPolicyExplain: true,
	wire.EndpointPolicyShadowGet: true, wire.EndpointPolicyShadowReport: true,
}

// requestMsg is request, also returning the reply, for its headers. A
// repeatable request is sent again while nothing answers it or toolgate
// fails it (5xx: a write or read lost in a leader election; not
// storage_full, which waits for someone to make room), for up to the
// client's unavailable wait, or an attempt times out, within the caller's
// deadline.
func (c *Client) requestMsg(ctx context.Context, endpoint string, body, out any) (*nats.Msg, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if c.connectWait > 0 {
		// The connect wait is counted from the request, whatever it
		// has done before the connection went.
		ctx = context.WithValue(ctx, connectByKey{}, time.Now().Add(c.connectWait))
	}
	if !repeatable[endpoint] {
		return c.attempt(ctx, endpoint, data, out)
	}
	// A reconnect while an attempt waits means that its request or its
	// answer may have gone with the server it went through: the request
	// is sent again at once, not after the attempt's timeout. With a
	// connect wait, so does the connection going: the next attempt waits
	// for it.
	reconnects := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnects)
	var downs chan nats.Status
	if c.connectWait > 0 {
		downs = c.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING)
		defer c.nc.RemoveStatusListener(downs)
	}
	giveUp := time.Now().Add(c.unavailable)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		msg, err, reconnected := c.attemptUntilChange(ctx, reconnects, downs, attemptTimeout, endpoint, data, out)
		if reconnected {
			continue
		}
		var down *UnreachableError
		if errors.As(err, &down) {
			return msg, err // it has waited its connect wait already
		}
		var apiErr *wire.APIError
		// A full store (wire.ErrStorageFull) is an answer: it stays full
		// until someone makes room.
		failed := errors.Is(err, ErrUnavailable) || errors.As(err, &apiErr) && apiErr.Status >= 500 && !errors.Is(err, wire.ErrStorageFull)
		unanswered := failed || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		if !unanswered || ctx.Err() != nil || failed && time.Now().After(giveUp) {
			return msg, err
		}
		select {
		case <-ctx.Done():
			return msg, err
		case <-time.After(wait):
		}
	}
}

var errReconnected = errors.New("reconnected")

// attemptUntilChange is one attempt of a request, bounded by timeout,
// and ended early (reconnected, to be sent again) by a reconnect, and by
// the connection going when downs is not nil.
func (c *Client) attemptUntilChange(ctx context.Context, reconnects, downs <-chan nats.Status, timeout time.Duration, endpoint string, data []byte, out any) (*nats.Msg, error, bool) {
	// A reconnect before this attempt is sent does not concern it.
	for len(reconnects) > 0 {
		<-reconnects
	}
	for len(downs) > 0 {
		<-downs
	}
	rctx, reconnected := context.WithCancelCause(ctx)
	defer reconnected(nil)
	actx, cancel := context.WithTimeout(rctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-reconnects:
			reconnected(errReconnected)
		case <-downs:
			reconnected(errReconnected)
		case <-actx.Done():
		}
	})
	msg, err := c.attempt(actx, endpoint, data, out)
	cancel()
	wg.Wait()
	return msg, err, err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), errReconnected)
}

// attempt sends a request once.
func (c *Client) attempt(ctx context.Context, endpoint string, data []byte, out any) (*nats.Msg, error) {
	if err := c.connected(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	subject := wire.APISubject(endpoint)
	ctx, release := c.denials.during(ctx, subject)
	defer release()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if denied := deniedCause(ctx); denied != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, denied)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: toolgate's request API is not reachable on NATS %s: nothing answers %s (is `toolgate serve` running there, with the intake role?)",
			ErrUnavailable, c.nc.ConnectedUrlRedacted(), subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%s: no answer from toolgate on NATS %s: %w", endpoint, c.nc.ConnectedUrlRedacted(), err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	return msg, wire.DecodeReply(msg.Header, msg.Data, out)
}

// Submit asks toolgate to gate a call and returns its entry: pending
// approval, scheduled, or already denied by policy (REJECTED_BY_POLICY is
// an entry here, not an error; Await and Request turn it into a
// *RejectedError). Submitting the same ToolCallID in the same conversation
// again returns the entry already there: retrying is safe.
func (c *Client) Submit(ctx context.Context, call machine.Call) (*machine.Entry, error) {
	w := c.watchBefore(call)
	var e machine.Entry
	if err := c.request(ctx, wire.EndpointSubmit, call, &e); err != nil {
		w.release()
		return nil, err
	}
	if call.CallerBotID == "" && c.caller.Load() == nil {
		name := e.CallerBotID
		c.caller.Store(&name)
	}
	start := e // Await's, apart from the caller's
	c.submitted.add(&start, w)
	return &e, nil
}

// watchBefore subscribes to the revisions of the call about to be
// submitted, when its pendingId and caller are known before it is (a
// ToolCallID given, and this client's name learned): NATS keeps a
// connection's order, so the subscription is in place before the submit
// is handled, and Await, starting from the submit's answer, hears every
// later revision without reading the entry again. Nil otherwise; Await
// then subscribes and reads.
func (c *Client) watchBefore(call machine.Call) *entryWatch {
	if call.ToolCallID == "" || call.ConversationID == "" {
		return nil
	}
	caller := call.CallerBotID
	if caller == "" {
		name := c.caller.Load()
		if name == nil {
			return nil
		}
		caller = *name
	}
	id := machine.PendingID(call.ConversationID, call.ToolCallID)
	if !machine.ValidPendingID(id) {
		return nil
	}
	return newEntryWatch(c.nc, wire.EntrySubject(caller, id))
}

// Get returns one entry.
func (c *Client) Get(ctx context.Context, pendingID string) (*machine.Entry, error) {
	e, _, err := c.read(ctx, pendingID)
	return e, err
}

// read returns one entry and the revision toolgate read it at.
func (c *Client) read(ctx context.Context, pendingID string) (*machine.Entry, uint64, error) {
	var e machine.Entry
	msg, err := c.requestMsg(ctx, wire.EndpointGet, wire.GetRequest{PendingID: pendingID}, &e)
	if err != nil {
		return nil, 0, err
	}
	rev, _ := strconv.ParseUint(msg.Header.Get(wire.RevisionHeader), 10, 64)
	return &e, rev, nil
}

// List returns the entries matching every field set in r, oldest first,
// following the pages toolgate answers in (r.Limit sizes them). With a
// ConversationID, toolgate reads only that conversation's entries.
func (c *Client) List(ctx context.Context, r wire.ListRequest) ([]*machine.Entry, error) {
	var entries []*machine.Entry
	for {
		var page wire.ListReply
		if err := c.request(ctx, wire.EndpointList, r, &page); err != nil {
			return nil, err
		}
		entries = append(entries, page.Items...)
		if page.NextCursor == "" {
			return entries, nil
		}
		r.Cursor = page.NextCursor
	}
}

// Reveal returns a call's arguments as they are, to a credential whose
// role the policy's reveal names; toolgate records who asked, and the
// call's history shows it.
func (c *Client) Reveal(ctx context.Context, pendingID string) (*wire.RevealReply, error) {
	var r wire.RevealReply
	if err := c.request(ctx, wire.EndpointReveal, wire.RevealRequest{PendingID: pendingID}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Rerun runs again, once, the call r.PendingID whose outcome is unknown
// (its executor was lost while the tool may have run; the entry's
// OutcomeUnknown), as a person who may decide it asks. The answer is the
// new call, whose RerunOf names the first; asked again by the same
// person, the same call. Nothing else runs such a call again.
func (c *Client) Rerun(ctx context.Context, r wire.RerunRequest) (*machine.Entry, error) {
	var e machine.Entry
	if err := c.request(ctx, wire.EndpointRerun, r, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Events reads a page of toolgate's events (TOOL_EVENTS) after r.After,
// waiting up to r.WaitMs for the first: ask again after the reply's Last
// to follow them. An agent's credential reads its own calls' only.
func (c *Client) Events(ctx context.Context, r wire.EventsRequest) (*wire.EventsReply, error) {
	var out wire.EventsReply
	if err := c.request(ctx, wire.EndpointEvents, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Decide approves or rejects the pending call r.PendingID. A call someone
// (or the timer) already decided is refused with an error matching
// machine.ErrConflict whose message says who decided it, when and why; a
// decider who may not decide it, with machine.ErrForbidden.
func (c *Client) Decide(ctx context.Context, r wire.DecideRequest) (*machine.Entry, error) {
	// One request id for every time the decision is sent: one sent again
	// after its answer was lost is answered with what the first wrote.
	if r.RequestID == "" {
		r.RequestID = requestID()
	}
	var e machine.Entry
	if err := c.request(ctx, wire.EndpointDecide, r, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// DecideMatching approves or rejects every call pending approval that
// r.Match covers, each its own transition, and says what was decided and
// what was skipped and why. It is not sent again when unanswered: the
// answer to a second would not list what the first decided.
func (c *Client) DecideMatching(ctx context.Context, r wire.DecideMatchingRequest) (*wire.DecideMatchingReply, error) {
	var reply wire.DecideMatchingReply
	if err := c.request(ctx, wire.EndpointDecideMatching, r, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

// Grants lists the grants in force: a conversation's, or with
// conversationID "" every one.
func (c *Client) Grants(ctx context.Context, conversationID string) ([]wire.Grant, error) {
	var grants []wire.Grant
	if err := c.request(ctx, wire.EndpointGrantsList, wire.GrantsRequest{ConversationID: conversationID}, &grants); err != nil {
		return nil, err
	}
	return grants, nil
}

// GrantPreview says what an approval of r.PendingID with r.Scope (task,
// session or always), narrowed by r.Match if given, would grant: the
// tool, the pattern, what bounds it, and the argument a grant may be
// narrowed by. It changes nothing.
func (c *Client) GrantPreview(ctx context.Context, r wire.GrantPreviewRequest) (*wire.GrantPreview, error) {
	var p wire.GrantPreview
	if err := c.request(ctx, wire.EndpointGrantsPreview, r, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// RevokeGrant ends a grant, and returns it.
func (c *Client) RevokeGrant(ctx context.Context, id string) (*wire.Grant, error) {
	var g wire.Grant
	if err := c.request(ctx, wire.EndpointGrantsRevoke, wire.RevokeGrantRequest{ID: id}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Cancel stops a call that has not started running.
func (c *Client) Cancel(ctx context.Context, pendingID, by, reason string) (*machine.Entry, error) {
	var e machine.Entry
	if err := c.request(ctx, wire.EndpointCancel, wire.CancelRequest{PendingID: pendingID, By: by, Reason: reason}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// CancelConversation cancels every call of a conversation that has not
// started running, and lists those that are running (and were not).
func (c *Client) CancelConversation(ctx context.Context, conversationID, by, reason string) (*wire.CancelConversationReply, error) {
	var r wire.CancelConversationReply
	err := c.request(ctx, wire.EndpointCancelConversation, wire.CancelRequest{ConversationID: conversationID, By: by, Reason: reason}, &r)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Started claims a runnable call (approved, or scheduled and due) for by,
// an agent about to run it itself, moving it to EXECUTING. The claim is a
// compare-and-set, so of an agent and an executor only one gets it; the
// other gets an error matching machine.ErrConflict. The claim is held for
// an hour.
func (c *Client) Started(ctx context.Context, pendingID, by string) (*machine.Entry, error) {
	return c.report(ctx, wire.EndpointStarted, wire.ReportRequest{PendingID: pendingID, By: by})
}

// Heartbeat renews by's claim on a call it runs itself for lease (an hour
// when 0), for a tool that runs longer than Started's hour.
func (c *Client) Heartbeat(ctx context.Context, pendingID, by string, lease time.Duration) (*machine.Entry, error) {
	return c.report(ctx, wire.EndpointHeartbeat, wire.ReportRequest{PendingID: pendingID, By: by, LeaseMs: lease.Milliseconds()})
}

// Succeed records that the call by claimed with Started ran, with its
// result (JSON, may be nil) and cost.
func (c *Client) Succeed(ctx context.Context, pendingID, by string, result json.RawMessage, cost float64) (*machine.Entry, error) {
	return c.report(ctx, wire.EndpointSucceeded, wire.ReportRequest{PendingID: pendingID, By: by, Result: result, Cost: cost})
}

// Fail records that the call by claimed with Started ran and failed.
func (c *Client) Fail(ctx context.Context, pendingID, by, errMsg string, cost float64) (*machine.Entry, error) {
	return c.report(ctx, wire.EndpointFailed, wire.ReportRequest{PendingID: pendingID, By: by, Error: errMsg, Cost: cost})
}

func (c *Client) report(ctx context.Context, endpoint string, r wire.ReportRequest) (*machine.Entry, error) {
	var e machine.Entry
	if err := c.request(ctx, endpoint, r, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// DeniedTools asks which of r.Tools the policy denies whatever a call's
// arguments (a deny rule naming the tool without a specifier, plan mode
// for a tool that is not read-only): tools not worth offering a model.
// Any role that reads calls may ask; nobody needs to read the policy.
func (c *Client) DeniedTools(ctx context.Context, r wire.DeniedToolsRequest) (wire.DeniedToolsReply, error) {
	var reply wire.DeniedToolsReply
	err := c.request(ctx, wire.EndpointDeniedTools, r, &reply)
	return reply, err
}

// Budgets returns the budget ledger: what each team reserved and spent per
// UTC day, beside its policy's daily limit; r.Team narrows it to one team.
func (c *Client) Budgets(ctx context.Context, r wire.BudgetsRequest) (wire.BudgetsReply, error) {
	var reply wire.BudgetsReply
	err := c.request(ctx, wire.EndpointBudgets, r, &reply)
	return reply, err
}

// Policy returns the policy document in force, as YAML, its secrets
// redacted.
func (c *Client) Policy(ctx context.Context) (wire.PolicyDocument, error) {
	return c.GetPolicy(ctx, wire.PolicyGetRequest{})
}

// GetPolicy returns the policy document in force as r asks: its secrets
// redacted, unless r.ShowSecrets (an admin's request).
func (c *Client) GetPolicy(ctx context.Context, r wire.PolicyGetRequest) (wire.PolicyDocument, error) {
	var doc wire.PolicyDocument
	err := c.request(ctx, wire.EndpointPolicyGet, r, &doc)
	return doc, err
}

// SetPolicy puts a policy document (YAML or JSON) in force. An invalid one
// is refused with an error matching machine.ErrInvalid that names each
// field at fault.
func (c *Client) SetPolicy(ctx context.Context, document string) (wire.PolicyDocument, error) {
	var doc wire.PolicyDocument
	err := c.request(ctx, wire.EndpointPolicySet, wire.PolicyDocument{Document: document}, &doc)
	return doc, err
}

// IssueCredential has toolgate issue a NATS credential for a new identity
// (admin only): the reply holds its .creds file, which toolgate keeps no
// copy of.
func (c *Client) IssueCredential(ctx context.Context, name string, role wire.Role) (wire.CredsReply, error) {
	var reply wire.CredsReply
	err := c.request(ctx, wire.EndpointCredsAdd, wire.CredsRequest{Name: name, Role: role}, &reply)
	return reply, err
}

// Credentials lists the credentials toolgate issued, revoked ones too
// (admin only).
func (c *Client) Credentials(ctx context.Context) ([]wire.Identity, error) {
	var reply wire.IdentitiesReply
	err := c.request(ctx, wire.EndpointCredsList, struct{}{}, &reply)
	return reply.Items, err
}

// RevokeCredential revokes every live credential of name (admin only).
func (c *Client) RevokeCredential(ctx context.Context, name string) ([]wire.Identity, error) {
	var reply wire.IdentitiesReply
	err := c.request(ctx, wire.EndpointCredsRevoke, wire.CredsRequest{Name: name}, &reply)
	return reply.Items, err
}

// connectByKey holds, in a request's context, when its connect wait
// ends.
type connectByKey struct{}

// connected waits, when the client has a connect wait, for a connection
// that is down to come back: until the request's connect wait ends (the
// connect wait after it began), or ctx does.
func (c *Client) connected(ctx context.Context) error {
	if c.connectWait == 0 || c.nc.IsConnected() || c.nc.IsClosed() {
		return nil // a closed connection fails the request itself, saying so
	}
	up := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(up)
	if c.nc.IsConnected() {
		return nil
	}
	by, ok := ctx.Value(connectByKey{}).(time.Time)
	if !ok {
		by = time.Now().Add(c.connectWait)
	}
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return &UnreachableError{URL: redactedURL(c.nc), Wait: c.connectWait}
	}
}

// redactedURL is the server nc is connected to or trying, without the
// credentials a URL may hold.
func redactedURL(nc *nats.Conn) string {
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	raw := nc.Opts.Url
	if raw == "" && len(nc.Opts.Servers) > 0 {
		raw = nc.Opts.Servers[0]
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "the NATS server configured"
	}
	u.User = nil
	return u.String()
}

// requestID returns a new request id (wire.DecideRequest.RequestID).
func requestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

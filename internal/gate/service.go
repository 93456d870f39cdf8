package gate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Config is what a Service is built from.
type Config struct {
	// NC announces a conversation's cancel to the executors running its
	// calls.
	NC      *nats.Conn
	Buckets *bus.Buckets
	// Policy decides what a submitted call needs (default: ask a human
	// about every call).
	Policy machine.Evaluator
	// Metrics, when set, counts the commands refused because their entry
	// had moved on.
	Metrics *metrics.Metrics
	// Grants, when set, is the grant store the policy matches calls
	// against, so that a grant this Service records is matched at once
	// (default: a store of its own over Buckets.Grants).
	Grants *bus.GrantStore
	// Issue, when set, signs new NATS credentials: only a toolgate that
	// holds the trust chain's keys can.
	Issue Issuer
	// Analytics, when set, reports the analytics (package analytics'
	// Report as JSON, over the hours ending now): the Analytics use case.
	Analytics func(ctx context.Context, hours int) (json.RawMessage, error)
	// Signer, when set, signs the receipt every transition appends
	// (receipts.go); without one, entries get none.
	Signer machine.Signer
	// Clock replaces time.Now, for tests.
	Clock func() time.Time
	Log   *slog.Logger
}

// Service is every use case of toolgate. It holds no state of its own
// beyond its stores, so any number of Services in any number of processes
// serve the same buckets; compare-and-set makes each transition happen
// once.
type Service struct {
	m           *machine.Machine
	calls       *bus.KVStore
	index       *bus.CallIndex // lists read it while it follows the bucket (Runtime.CallsView)
	work        *bus.WorkQueue // executors take work from it while it follows the bucket (Runtime.WorkView)
	takers      takers         // the requests for work that wait, which their executor may withdraw
	policies    *bus.PolicyStore
	grants      *bus.GrantStore
	budgets     *bus.BudgetLedger
	rates       *bus.RateCounters
	identities  *bus.IdentityStore
	tokens      *bus.DecisionTokenStore
	archive     *bus.Archive     // nil: finished calls are never retired
	archivedIDs *bus.ArchivedIDs // which calls the archive may hold, while it follows it (Runtime.FollowArchive)
	analytics   func(ctx context.Context, hours int) (json.RawMessage, error)
	issue       Issuer
	clock       func() time.Time
	nc          *nats.Conn
	limits      limits
	masker      masker
	mx          *metrics.Metrics
	log         *slog.Logger
	// signer signs receipts; receiptKeys publishes the keys.
	signer      machine.Signer
	receiptKeys *bus.ReceiptKeyStore
}

// limits is what of the policy Budgets shows and DeniedTools asks:
// *policy.Engine has it.
type limits interface {
	Resolve(team, conversationID string) policy.Resolved
	DeniedTools(team, conversationID, permissionMode string, tools []string) (map[string]string, error)
	UnreadableTools(team, conversationID string, tools []string) map[string]string
}

// New returns the Service over cfg's buckets.
func New(cfg Config) *Service {
	js := jetStream(cfg)
	index := bus.NewCallIndex(js, cfg.Buckets.Calls)
	work := bus.NewWorkQueue()
	calls := bus.NewKVStore(js, cfg.Buckets.Calls).WithIndex(index).WithWorkQueue(work)
	opts := []machine.Option{}
	if cfg.Policy != nil {
		opts = append(opts, machine.WithEvaluator(cfg.Policy))
	}
	if cfg.Clock != nil {
		opts = append(opts, machine.WithClock(cfg.Clock))
	}
	if cfg.Signer != nil {
		opts = append(opts, machine.WithSigner(cfg.Signer))
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lim, _ := cfg.Policy.(limits)
	mk, _ := cfg.Policy.(masker)
	grants := cfg.Grants
	if grants == nil {
		grants = bus.NewGrantStore(js, cfg.Buckets.Grants)
	}
	return &Service{
		limits:      lim,
		masker:      mk,
		m:           machine.New(calls, opts...),
		calls:       calls,
		index:       index,
		work:        work,
		policies:    bus.NewPolicyStore(js, cfg.Buckets.Policies),
		grants:      grants,
		budgets:     bus.NewBudgetLedger(js, cfg.Buckets.Budgets),
		rates:       bus.NewRateCounters(js, cfg.Buckets.RateLimits),
		identities:  bus.NewIdentityStore(js, cfg.Buckets.Identities),
		tokens:      bus.NewDecisionTokenStore(js, cfg.Buckets.DecisionTokens),
		archive:     newArchive(cfg),
		archivedIDs: bus.NewArchivedIDs(js),
		analytics:   cfg.Analytics,
		issue:       cfg.Issue,
		clock:       cfg.Clock,
		nc:          cfg.NC,
		mx:          cfg.Metrics,
		log:         log,

		signer:      cfg.Signer,
		receiptKeys: newReceiptKeyStore(cfg.Buckets),
	}
}

// observe counts a refused transition, once, here: every command of every
// transport comes through the Service.
func (s *Service) observe(e *machine.Entry, err error) (*machine.Entry, error) {
	if err != nil && s.mx != nil {
		s.mx.ObserveError(err)
	}
	return e, err
}

// Submit evaluates the policy for c and records its entry; submitting the
// same call again returns the entry already there. An agent submits as
// itself: it cannot ask on another's behalf, nor so make itself the
// approver of its own call.
func (s *Service) Submit(ctx context.Context, a Actor, c machine.Call) (*machine.Entry, error) {
	e, _, err := s.SubmitOnce(ctx, a, c)
	return e, err
}

// SubmitOnce is Submit, and reports whether this submit created the
// entry (false: it answers with the entry an earlier one created).
func (s *Service) SubmitOnce(ctx context.Context, a Actor, c machine.Call) (*machine.Entry, bool, error) {
	if err := a.require("submit calls", wire.RoleAgent); err != nil {
		return nil, false, err
	}
	if c.CallerBotID != "" && c.CallerBotID != a.Name && !a.Can(wire.RoleAdmin) {
		return nil, false, fmt.Errorf("%w: callerBotId %q: %s submits as itself", machine.ErrForbidden, c.CallerBotID, a.Name)
	}
	c.CallerBotID = cmp.Or(c.CallerBotID, a.Name)
	if c.ToolCallID != "" && c.ConversationID != "" {
		// A retry of a call retired to the archive is that call, not a
		// new one to run again (one read of the archive per submit that
		// names its toolCallId of a call the archive may hold: a
		// generated one is new, and a process that follows the
		// archive's ids knows most others are too). The archive is a
		// stream of its own, with a leader of its own: while it elects
		// one, submits go on after a short wait rather than stall, since
		// only a retry of a call finished --retention ago could be
		// mistaken for a new one then.
		pendingID := machine.PendingID(c.ConversationID, c.ToolCallID)
		err := machine.ErrNotFound
		var prev *wire.ArchivedCall
		if s.archivedIDs.MayHold(pendingID) {
			actx, cancel := context.WithTimeout(ctx, archiveCheckWait)
			prev, err = s.archived(actx, pendingID)
			cancel()
		}
		switch {
		case err == nil:
			e, err := machine.SameCall(prev.Entry, c)
			if err != nil {
				return nil, false, fmt.Errorf("submit %s: %w", prev.Entry.PendingID, err)
			}
			return s.shown(a, e), false, nil
		case isNotFound(err):
		case ctx.Err() != nil:
			return nil, false, fmt.Errorf("submit: %w", ctx.Err())
		default:
			s.log.Warn("submit: the archive did not answer whether the call was retired; taking it as new", "toolCallId", c.ToolCallID, "err", err)
		}
	}
	claimer := s.claimer()
	e, created, err := s.m.SubmitAndClaim(ctx, c, claimer.claim)
	claimer.settle(e, err == nil && created)
	return s.shown(a, e), created, err
}

// Get returns one entry.
func (s *Service) Get(ctx context.Context, a Actor, r wire.GetRequest) (*machine.Entry, error) {
	e, _, err := s.Read(ctx, a, r)
	return e, err
}

// Read returns one entry and the revision it was read at: an agent
// awaiting the entry orders what it hears of it by revision. An agent
// reads only its own calls; another's is not found, as if it were not
// there.
func (s *Service) Read(ctx context.Context, a Actor, r wire.GetRequest) (*machine.Entry, uint64, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, 0, err
	}
	return s.readShown(ctx, a, r.PendingID)
}

// readShown is Read of a pending id known to be set.
func (s *Service) readShown(ctx context.Context, a Actor, pendingID string) (*machine.Entry, uint64, error) {
	e, rev, err := s.read(ctx, a, pendingID)
	if err != nil {
		return nil, 0, err
	}
	return s.shown(a, e), rev, nil
}

// read is Read, but the entry as it is stored.
func (s *Service) read(ctx context.Context, a Actor, pendingID string) (*machine.Entry, uint64, error) {
	if err := a.require("read calls", readers...); err != nil {
		return nil, 0, err
	}
	e, rev, err := s.calls.Get(ctx, pendingID)
	if isNotFound(err) {
		// Finished and retired: the archive has it.
		if c, aerr := s.archived(ctx, pendingID); aerr == nil {
			e, rev, err = c.Entry, c.Revision, nil
		} else if !isNotFound(aerr) {
			err = aerr
		}
	}
	if err == nil && !a.SeesAll() && !a.owns(e) {
		err = machine.ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", pendingID, err)
	}
	return e, rev, nil
}

// ReadReader is Read as one actor does it, in the shape client.AwaitWith
// reads entries.
func (s *Service) ReadReader(a Actor) func(context.Context, string) (*machine.Entry, uint64, error) {
	return func(ctx context.Context, pendingID string) (*machine.Entry, uint64, error) {
		return s.Read(ctx, a, wire.GetRequest{PendingID: pendingID})
	}
}

// History returns the transitions an entry went through, oldest first.
func (s *Service) History(ctx context.Context, a Actor, r wire.GetRequest) ([]wire.HistoryItem, error) {
	if _, _, err := s.Read(ctx, a, r); err != nil {
		return nil, err
	}
	pendingID := r.PendingID
	items, err := s.calls.History(ctx, pendingID)
	if len(items) == 0 && (err == nil || isNotFound(err)) {
		// Read found it, so it was retired: the archive has its history.
		if c, aerr := s.archived(ctx, pendingID); aerr == nil {
			return archivedHistory(c), nil
		}
	}
	return items, err
}

// List returns one page of the entries r asks for. With a conversation,
// only its keys are read; without, the index of the bucket (Runtime.CallsView)
// while it follows it, else the whole bucket. An agent lists only its own
// calls.
func (s *Service) List(ctx context.Context, a Actor, r wire.ListRequest) (wire.ListReply, error) {
	if err := a.require("list calls", readers...); err != nil {
		return wire.ListReply{}, err
	}
	if !a.SeesAll() {
		if r.CallerBotID != "" && r.CallerBotID != a.Name {
			return wire.ListReply{}, fmt.Errorf("%w: callerBotId %q: %s lists only its own calls", machine.ErrForbidden, r.CallerBotID, a.Name)
		}
		r.CallerBotID = a.Name
	}
	if _, err := listPage(nil, r); err != nil {
		return wire.ListReply{}, err // a bad filter, before anything is read
	}
	if page, ok, err := s.listIndexed(ctx, a, r); ok || err != nil {
		return page, err
	}
	return s.listRead(ctx, a, r)
}

// listRead is List as it reads the bucket, while the index cannot
// answer: a conversation's keys (and its archived calls), or all of it.
func (s *Service) listRead(ctx context.Context, a Actor, r wire.ListRequest) (wire.ListReply, error) {
	var all []*machine.Entry
	var err error
	if r.ConversationID != "" {
		// A conversation's calls, finished or not, retired or not.
		all, err = s.calls.ListConversation(ctx, r.ConversationID)
		if err == nil {
			all, err = s.withArchived(ctx, r.ConversationID, all)
		}
	} else {
		all, err = s.calls.ListAll(ctx)
	}
	if err != nil {
		return wire.ListReply{}, err
	}
	s.shownAll(a, all)
	return listPage(all, r)
}

// Decide approves or rejects a pending call. An approval with scope
// task, session or always records a grant that later like calls match
// (recordScope); an admin's always with PersistRule, an allow rule.
func (s *Service) Decide(ctx context.Context, a Actor, r wire.DecideRequest) (*machine.Entry, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	return s.decide(ctx, a, r.PendingID, machine.Decision{
		Approve: r.Approved, By: r.By, Reason: r.Reason, Scope: r.Scope, Arguments: r.Arguments,
		For: time.Duration(r.ForMs) * time.Millisecond, PersistRule: r.PersistRule, SingleUse: r.SingleUse,
	})
}

// decide is Decide of a pending id known to be set, as the machine
// takes a decision.
func (s *Service) decide(ctx context.Context, a Actor, pendingID string, d machine.Decision) (*machine.Entry, error) {
	if err := a.require("decide calls", wire.RoleApprover); err != nil {
		return nil, err
	}
	by, err := a.as(d.By)
	if err != nil {
		return nil, err
	}
	d.By = by
	if d.PersistRule && !a.Can(wire.RoleAdmin) {
		return nil, fmt.Errorf("%w: persistRule: only an admin writes an approval into the policy; without it, \"always\" records a grant", machine.ErrForbidden)
	}
	if bytes.Contains(d.Arguments, []byte(policy.RedactedValue)) {
		// An edit of arguments shown masked: what the approver left
		// masked keeps its value.
		if cur, _, err := s.calls.Get(ctx, pendingID); err == nil {
			d.Arguments = policy.UnmaskEdit(d.Arguments, cur.ToolArguments)
		}
		if bytes.Contains(d.Arguments, []byte(policy.RedactedValue)) {
			return nil, fmt.Errorf("%w: arguments: %s stands where a secret was, in a value changed around it: give the value, or leave the value as it was shown", machine.ErrInvalid, policy.RedactedValue)
		}
	}
	c := s.claimer()
	d.Claim = c.claim
	e, err := s.observe(s.m.Decide(ctx, pendingID, d))
	c.settle(e, err == nil)
	if errors.Is(err, machine.ErrExpired) {
		// The deadline passed and no timer has acted on it yet: act now,
		// so the refused approver and the agent see the same outcome.
		if _, xerr := s.Expire(ctx, pendingID); xerr != nil && !errors.Is(xerr, machine.ErrConflict) {
			s.log.Warn("expiring a call past its deadline failed", "pendingId", pendingID, "err", xerr)
		}
	}
	if err != nil {
		return nil, s.shownErr(a, err)
	}
	if err := s.recordScope(ctx, e, d); err != nil {
		// The decision stands; only its reach beyond this call failed.
		s.log.Error("recording the decision's scope failed", "pendingId", e.PendingID, "scope", e.DecisionScope, "err", err)
	}
	return s.shown(a, e), nil
}

// recordScope records how far an approval reaches beyond its call: a
// session grant for the conversation, or an "always" grant for the team
// (both until revoked, or d.For), or with d.PersistRule an allow rule in
// the team's policy.
func (s *Service) recordScope(ctx context.Context, e *machine.Entry, d machine.Decision) error {
	if e.Status != machine.StateApproved || e.DecisionScope == machine.ScopeOnce || e.DecisionScope == "" {
		return nil
	}
	g, err := grantOf(e, e.DecisionScope)
	if err != nil {
		return err
	}
	if d.PersistRule {
		return s.policies.AddAllowRule(ctx, e.Team, g.Pattern)
	}
	g.By, g.At = e.ApprovedOrRejectedByUserID, e.DecisionTime
	if d.For > 0 {
		g.ExpiresAt = e.DecisionTime + d.For.Milliseconds()
	}
	g.SingleUse = d.SingleUse
	_, err = s.grants.Add(ctx, g, s.now())
	return err
}

// grantOf is the grant an approval of e with scope (task, session or
// always) records, but for who grants it and until when: what it covers
// (the pattern policy.GrantPattern derives from the call) and what bounds
// it. GrantPreview shows it before anyone grants; recordScope records it.
func grantOf(e *machine.Entry, scope machine.Scope) (policy.Grant, error) {
	pattern, err := policy.GrantPattern(e.Call())
	if err != nil {
		return policy.Grant{}, err
	}
	g := policy.Grant{Pattern: pattern, Team: e.Team, PendingID: e.PendingID}
	switch scope {
	case machine.ScopeTask:
		g.ConversationID, g.TaskID = e.ConversationID, e.TaskID
	case machine.ScopeSession:
		g.ConversationID = e.ConversationID
	}
	return g, nil
}

// GrantPreview says what an approval of a call with r.Scope would grant,
// before anyone grants it: the tool, the pattern derived from the call,
// and what bounds the grant. It changes nothing. Approvers and viewers
// see the pattern as they see the call's arguments: its secrets masked.
func (s *Service) GrantPreview(ctx context.Context, a Actor, r wire.GrantPreviewRequest) (*wire.GrantPreview, error) {
	if err := a.require("preview grants", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	switch r.Scope {
	case machine.ScopeTask, machine.ScopeSession, machine.ScopeAlways:
	case "", machine.ScopeOnce:
		return nil, fmt.Errorf("%w: scope: an approval once records no grant; preview task, session or always", machine.ErrInvalid)
	default:
		return nil, fmt.Errorf("%w: scope: must be task, session or always, got %q", machine.ErrInvalid, r.Scope)
	}
	if r.PendingID == "" {
		return nil, fmt.Errorf("%w: pendingId: required", machine.ErrInvalid)
	}
	e, _, err := s.calls.Get(ctx, r.PendingID)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", r.PendingID, err)
	}
	if r.Scope == machine.ScopeTask && e.TaskID == "" {
		return nil, fmt.Errorf("%w: scope task: the call names no task (it was submitted without a taskId)", machine.ErrInvalid)
	}
	if e.Quorum != nil {
		return nil, fmt.Errorf("%w: scope %s: a call under a quorum records no grant (later calls would skip the quorum); approve it once", machine.ErrInvalid, r.Scope)
	}
	shown := s.shown(a, e)
	g, err := grantOf(e, r.Scope)
	if err != nil {
		if shown != e {
			// The refusal quotes the call: quote it as a is shown it.
			if _, serr := grantOf(shown, r.Scope); serr != nil {
				err = serr
			} else {
				err = fmt.Errorf("%w: toolArguments: no pattern covers this %s call alone; approve it once", machine.ErrInvalid, e.ToolName)
			}
		}
		return nil, fmt.Errorf("grant of %s: %w", r.PendingID, err)
	}
	if shown != e {
		// Derived from the arguments as a is shown them: a secret in a
		// command line stays masked here too.
		g.Pattern = policy.ShownGrantPattern(shown.Call())
	}
	return &wire.GrantPreview{PendingID: e.PendingID, ToolName: e.ToolName, Scope: r.Scope, Pattern: g.Pattern,
		ConversationID: g.ConversationID, TaskID: g.TaskID, Team: g.Team}, nil
}

// Grants lists the grants in force (a conversation's, when given): who
// granted each, from which call, what it covers and until when.
func (s *Service) Grants(ctx context.Context, a Actor, r wire.GrantsRequest) ([]wire.Grant, error) {
	if err := a.require("list grants", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	all, err := s.grants.All(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	grants := []wire.Grant{}
	for _, g := range all {
		if g.Live(now) && (r.ConversationID == "" || g.ConversationID == r.ConversationID) {
			w := wireGrant(g)
			if !a.system && !a.Can(wire.RoleAdmin) {
				// A pattern derived from a command line may quote a
				// secret in it: masked as the call's arguments are.
				if tool, inner, ok := strings.Cut(w.Pattern, "("); ok && strings.HasSuffix(inner, ")") {
					w.Pattern = tool + "(" + s.maskText(g.Team, g.ConversationID, strings.TrimSuffix(inner, ")")) + ")"
				}
			}
			grants = append(grants, w)
		}
	}
	slices.SortFunc(grants, func(x, y wire.Grant) int { return cmp.Or(cmp.Compare(x.At, y.At), strings.Compare(x.ID, y.ID)) })
	return grants, nil
}

// RevokeGrant ends a grant at once, on every process that matches grants.
func (s *Service) RevokeGrant(ctx context.Context, a Actor, r wire.RevokeGrantRequest) (*wire.Grant, error) {
	if err := a.require("revoke grants", wire.RoleApprover); err != nil {
		return nil, err
	}
	if r.ID == "" {
		return nil, fmt.Errorf("%w: id: required", machine.ErrInvalid)
	}
	g, err := s.grants.Revoke(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	w := wireGrant(g)
	return &w, nil
}

func wireGrant(g policy.Grant) wire.Grant {
	return wire.Grant{ID: g.ID, Pattern: g.Pattern, ConversationID: g.ConversationID, Team: g.Team, By: g.By, At: g.At,
		TaskID: g.TaskID, PendingID: g.PendingID, ExpiresAt: g.ExpiresAt, SingleUse: g.SingleUse}
}

// Cancel stops a call that has not started running: an approver any
// call, an agent its own.
func (s *Service) Cancel(ctx context.Context, a Actor, r wire.CancelRequest) (*machine.Entry, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	pendingID, reason := r.PendingID, r.Reason
	by, err := a.as(r.By)
	if err != nil {
		return nil, err
	}
	if err := a.require("cancel calls", wire.RoleAgent, wire.RoleApprover); err != nil {
		return nil, err
	}
	if !a.Can(wire.RoleApprover) {
		if _, _, err := s.readShown(ctx, a, pendingID); err != nil {
			return nil, err
		}
	}
	e, err := s.observe(s.m.Cancel(ctx, pendingID, by, reason))
	return s.shown(a, e), s.shownErr(a, err)
}

// CancelConversation cancels every call of a conversation that has not
// started running (an agent's own calls only, an approver's all of them),
// reading only its keys, and announces the cancel so that executors stop
// the calls already running, which no transition can cancel.
func (s *Service) CancelConversation(ctx context.Context, a Actor, r wire.CancelRequest) (*wire.CancelConversationReply, error) {
	if err := required("conversationId", r.ConversationID); err != nil {
		return nil, err
	}
	conversationID, reason := r.ConversationID, r.Reason
	by, err := a.as(r.By)
	if err != nil {
		return nil, err
	}
	if err := a.require("cancel conversations", wire.RoleAgent, wire.RoleApprover); err != nil {
		return nil, err
	}
	caller := ""
	if !a.Can(wire.RoleApprover) {
		caller = a.Name
	}
	entries, err := s.calls.ListConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	reply := &wire.CancelConversationReply{Cancelled: []*machine.Entry{}, Running: []*machine.Entry{}}
	for _, e := range entries {
		if e.Status.Terminal() || caller != "" && e.CallerBotID != caller {
			continue
		}
		if e.Status == machine.StateExecuting {
			reply.Running = append(reply.Running, e)
			continue
		}
		got, err := s.m.Cancel(ctx, e.PendingID, by, reason)
		var te *machine.TransitionError
		switch {
		case errors.As(err, &te):
			// It moved on while we looked: running now, or finished.
			if te.Entry.Status == machine.StateExecuting {
				reply.Running = append(reply.Running, te.Entry)
			}
		case err != nil:
			return nil, err
		default:
			reply.Cancelled = append(reply.Cancelled, got)
		}
	}
	if len(reply.Running) > 0 {
		data, _ := json.Marshal(reply)
		if err := s.nc.Publish(wire.CancelSubject, data); err != nil {
			return nil, fmt.Errorf("announce cancel of %s: %w", conversationID, err)
		}
	}
	s.shownAll(a, reply.Cancelled)
	s.shownAll(a, reply.Running)
	return reply, nil
}

// runs checks that a may run a call: an executor any, an agent (which
// runs its own tools, as Claude Code does) its own.
func (s *Service) runs(ctx context.Context, a Actor, pendingID string) error {
	if err := a.require("run calls", wire.RoleExecutor, wire.RoleAgent); err != nil {
		return err
	}
	if !a.Can(wire.RoleExecutor) {
		_, _, err := s.readShown(ctx, a, pendingID)
		return err
	}
	return nil
}

// required refuses a request that leaves field empty.
func required(field, value string) error {
	if value == "" {
		return fmt.Errorf("%w: %s: required", machine.ErrInvalid, field)
	}
	return nil
}

// report checks a report on a call: its pending id is set.
func report(r wire.ReportRequest) error {
	return required("pendingId", r.PendingID)
}

// leaseOf is how long the lease a claim, heartbeat or retry asks for
// lasts: r.LeaseMs, or an hour when it names none.
func leaseOf(r wire.ReportRequest) time.Duration {
	if r.LeaseMs > 0 {
		return time.Duration(r.LeaseMs) * time.Millisecond
	}
	return time.Hour
}

// outcomeOf is the outcome a succeeded or failed report records.
func outcomeOf(r wire.ReportRequest) machine.Outcome {
	return machine.Outcome{Holder: r.By, Result: r.Result, Error: r.Error, Cost: r.Cost}
}

// ClaimAt hands a runnable call to r.By (under a's name) for its lease
// (r.LeaseMs, default an hour), from r.Revision, as the claimant last saw
// the entry (0: unknown): where this process wrote the entry at that
// revision, the claim reads no entry (machine.ClaimAt; an agent's claim
// still reads the call, to check it is its own).
func (s *Service) ClaimAt(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	if err := report(r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	return s.answer(a)(s.observe(s.m.ClaimAt(ctx, r.PendingID, r.Revision, a.holder(r.By), leaseOf(r))))
}

// Retry starts another attempt of a call whose attempt r.Attempt failed,
// for the holder of its lease, with a new lease (r.LeaseMs, default an
// hour).
func (s *Service) Retry(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	if err := report(r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	return s.answer(a)(s.observe(s.m.Retry(ctx, r.PendingID, a.holder(r.By), r.Attempt, leaseOf(r))))
}

// Heartbeat renews the lease of the executor running a call (r.LeaseMs
// from now, default an hour), for tools that run longer than their claim
// gave them.
func (s *Service) Heartbeat(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	if err := report(r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	return s.answer(a)(s.observe(s.m.Heartbeat(ctx, r.PendingID, a.holder(r.By), leaseOf(r))))
}

// Complete records a successful run: r.Result and r.Cost.
func (s *Service) Complete(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	if err := report(r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	o := outcomeOf(r)
	o.Holder = a.holder(o.Holder)
	return s.answer(a)(s.observe(s.m.Complete(ctx, r.PendingID, o)))
}

// Fail records a failed run: r.Error and r.Cost.
func (s *Service) Fail(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	if err := report(r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	o := outcomeOf(r)
	o.Holder = a.holder(o.Holder)
	return s.answer(a)(s.observe(s.m.Fail(ctx, r.PendingID, o)))
}

// Expire handles a pending call whose approval deadline has passed.
func (s *Service) Expire(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return s.observe(s.m.Expire(ctx, pendingID))
}

// Remind reminds the approvers of a call still pending before its
// deadline (the timer's, at the call's reminderAt).
func (s *Service) Remind(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return s.observe(s.m.Remind(ctx, pendingID))
}

// Escalate widens who may decide a call nobody has decided by its next
// escalation tier's time (the timer's, at that time).
func (s *Service) Escalate(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return s.observe(s.m.Escalate(ctx, pendingID))
}

// AbandonLease fails a running call whose executor's lease ran out on its
// last allowed attempt.
func (s *Service) AbandonLease(ctx context.Context, pendingID string) (*machine.Entry, error) {
	return s.observe(s.m.AbandonLease(ctx, pendingID))
}

// Budgets returns the budget ledger: what each team reserved and spent per
// day, beside the daily limit its policy sets now. With a team, only that
// team's days are read.
func (s *Service) Budgets(ctx context.Context, a Actor, r wire.BudgetsRequest) (wire.BudgetsReply, error) {
	if err := a.require("read budgets", wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.BudgetsReply{}, err
	}
	var days []bus.DayBudget
	var err error
	if r.Team != nil {
		days, err = s.budgets.ListTeam(ctx, *r.Team)
	} else {
		days, err = s.budgets.List(ctx)
	}
	if err != nil {
		return wire.BudgetsReply{}, fmt.Errorf("budgets: %w", err)
	}
	reply := wire.BudgetsReply{Items: make([]wire.Budget, 0, len(days))}
	for _, d := range days {
		b := wire.Budget{Team: d.Team, Day: d.Day, Reserved: d.Reserved.Float64(), Spent: d.Spent.Float64()}
		if s.limits != nil {
			b.Limit = s.limits.Resolve(d.Team, "").DailyCostLimit
		}
		reply.Items = append(reply.Items, b)
	}
	return reply, nil
}

// Policy returns the policy document in force, its secrets redacted
// (policy.Redacted) unless r asks to see them, which only an admin may.
func (s *Service) Policy(ctx context.Context, a Actor, r wire.PolicyGetRequest) (wire.PolicyDocument, error) {
	if err := a.require("read the policy", wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.PolicyDocument{}, err
	}
	if r.ShowSecrets {
		if err := a.require("show the policy's secrets", wire.RoleAdmin); err != nil {
			return wire.PolicyDocument{}, err
		}
	}
	doc, rev, err := s.policies.Get(ctx)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if !r.ShowSecrets {
		doc = policy.Redacted(doc)
	}
	data, err := policy.Marshal(doc)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	return wire.PolicyDocument{Document: string(data), Revision: rev}, nil
}

// DeniedTools says which of r.Tools the policy in force denies whatever a
// call's arguments, so that an agent (or a gateway offering tools to a
// model) can leave them out without reading the policy, which only
// viewers and approvers may. It says no more than submitting a call of
// each tool would. It also names the tools the policy has rules on the
// arguments of without saying which argument they read (Unreadable), with
// the fix, quoting no rule.
func (s *Service) DeniedTools(ctx context.Context, a Actor, r wire.DeniedToolsRequest) (wire.DeniedToolsReply, error) {
	if err := a.require("ask which tools the policy denies", wire.RoleAgent, wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.DeniedToolsReply{}, err
	}
	if len(r.Tools) > wire.MaxDeniedTools {
		return wire.DeniedToolsReply{}, fmt.Errorf("%w: tools: at most %d, got %d", machine.ErrInvalid, wire.MaxDeniedTools, len(r.Tools))
	}
	for i, tool := range r.Tools {
		if !machine.ValidToolName(tool) {
			return wire.DeniedToolsReply{}, fmt.Errorf("%w: tools[%d]: must be 1 to 128 letters, digits, '_' or '-', got %q", machine.ErrInvalid, i, tool)
		}
	}
	reply := wire.DeniedToolsReply{Denied: map[string]string{}}
	if s.limits == nil {
		return reply, nil // no policy engine: nothing is denied outright
	}
	denied, err := s.limits.DeniedTools(r.Team, r.ConversationID, r.PermissionMode, r.Tools)
	if err != nil {
		return wire.DeniedToolsReply{}, err // a bad permission mode: machine.ErrInvalid
	}
	if denied != nil {
		reply.Denied = denied
	}
	if unreadable := s.limits.UnreadableTools(r.Team, r.ConversationID, r.Tools); len(unreadable) > 0 {
		reply.Unreadable = unreadable
	}
	return reply, nil
}

// SetPolicy puts a policy document in force on every replica. A document
// that does not parse or validate is refused, naming each field at fault,
// and the policy in force stays as it was; so is one that holds the
// redaction placeholder where a secret goes (a document read redacted and
// set again), rather than storing the placeholder as the secret. The
// reply is the document stored, redacted.
func (s *Service) SetPolicy(ctx context.Context, a Actor, r wire.PolicyDocument) (wire.PolicyDocument, error) {
	if err := a.require("set the policy", wire.RoleAdmin); err != nil {
		return wire.PolicyDocument{}, err
	}
	doc, err := policy.Parse([]byte(r.Document))
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if err := s.policies.Set(ctx, doc); err != nil {
		return wire.PolicyDocument{}, err
	}
	return s.Policy(ctx, a, wire.PolicyGetRequest{})
}

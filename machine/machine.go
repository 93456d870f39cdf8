package machine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/looplab/fsm"
)

// Machine runs the commands that move entries, each through transition.
// It holds no entry state of its own, so any number of Machines in any
// number of processes can share one Store.
type Machine struct {
	store    Store
	eval     Evaluator
	now      func() time.Time
	observer func(ctx context.Context, e *Entry)
	signer   Signer // receipts (receipt.go); nil: none
}

// Option configures a Machine.
type Option func(*Machine)

// WithEvaluator sets the policy that Submit consults (default AskEverything).
func WithEvaluator(e Evaluator) Option { return func(m *Machine) { m.eval = e } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(m *Machine) { m.now = now } }

// WithObserver has f called with every entry this Machine writes, after the
// write won. Only the winner of a race sees its transition, so f runs once
// per transition across all Machines; but it does not run at all if the
// process dies right after the write, so nothing that must happen may hang
// on it (toolgate reacts to transitions through the relay's events; tests
// and benchmarks count with an observer).
func WithObserver(f func(ctx context.Context, e *Entry)) Option {
	return func(m *Machine) { m.observer = f }
}

// New returns a Machine over store.
func New(store Store, opts ...Option) *Machine {
	m := &Machine{store: store, eval: AskEverything, now: time.Now}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Submit evaluates the policy for c and creates its entry in the first state
// the verdict calls for. Submitting the same call (conversation,
// toolCallId, caller, tool and arguments) again returns the entry already
// there, unchanged: agents retry. Reusing the conversation and toolCallId
// for another call is refused with ErrIdempotencyConflict.
func (m *Machine) Submit(ctx context.Context, c Call) (*Entry, error) {
	e, _, err := m.SubmitOnce(ctx, c)
	return e, err
}

// SubmitOnce is Submit, and reports whether this submit created the
// entry (false: it answers with the entry an earlier one created).
func (m *Machine) SubmitOnce(ctx context.Context, c Call) (*Entry, bool, error) {
	return m.SubmitAndClaim(ctx, c, nil)
}

// SubmitAndClaim is SubmitOnce for a call that, should the policy let it
// run at once, is claimed for claimant (when not nil): the entry is then
// created claimed for it (scheduled and started, two receipts, one
// write).
func (m *Machine) SubmitAndClaim(ctx context.Context, c Call, claimant *Claimant) (*Entry, bool, error) {
	if err := c.validate(); err != nil {
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	id := PendingID(c.ConversationID, c.ToolCallID)
	// A retry of a call is answered with the call, before the policy
	// takes a budget's or a rate limit's share for it again.
	if abs, ok := m.store.(AbsenceStore); !ok || !abs.Absent(id) {
		if e, _, err := m.store.Get(ctx, id); err == nil {
			return sameCall(e, c)
		} else if !errors.Is(err, ErrNotFound) {
			return nil, false, fmt.Errorf("submit %s: %w", id, err)
		}
	}
	v, err := m.eval.Evaluate(ctx, c)
	if err != nil {
		return nil, false, fmt.Errorf("submit %s: policy: %w", id, err)
	}
	now := m.now()
	e := &Entry{
		PendingID:       id,
		ToolCallID:      c.ToolCallID,
		ToolName:        c.ToolName,
		ToolArguments:   c.Arguments,
		ArgumentsDigest: ArgumentsDigest(c.Arguments),
		PolicyRevision:  v.PolicyRevision,
		Risk:            v.Risk,
		CallerBotID:     c.CallerBotID,
		ConversationID:  c.ConversationID,
		RequestedAt:     now.UnixMilli(),
		StatusReason:    v.Reason,
		Team:            c.Team,
		TaskID:          c.TaskID,
		EstimatedCost:   c.EstimatedCost,
		PermissionMode:  c.PermissionMode,
		Description:     v.Description,

		MaxExecutionAttempts: v.MaxExecutionAttempts,
		CostReserved:         v.CostReserved,
		CostDay:              v.CostDay,
	}
	var ev Event
	switch v.Action {
	case ActionAsk:
		ev = EventAsk
		timeout := v.ApprovalTimeout
		if timeout <= 0 {
			timeout = DefaultApprovalTimeout
		}
		e.ApprovalTimeoutAt = now.Add(timeout).UnixMilli()
		if r := v.ApprovalReminder; r > 0 && r < timeout {
			e.ReminderAt = now.Add(r).UnixMilli()
		}
		e.AutoRejectOnTimeout = v.AutoRejectOnTimeout || v.OnTimeout == TimeoutReject
		e.OnTimeout, e.Respondable = v.timeoutOutcome(), v.Respondable
		e.UserIDToApprove = v.Approver
		e.Approvers = v.Approvers
		e.Quorum = v.Quorum
		for _, t := range v.Escalate {
			e.Escalations = append(e.Escalations, Escalation{At: now.Add(t.After).UnixMilli(), To: t.To})
		}
	case ActionRun:
		ev = EventSchedule
		e.ScheduledExecutionTime = now.Add(max(v.Delay, 0)).UnixMilli()
	case ActionDeny:
		ev = EventDeny
		e.DecisionTime = now.UnixMilli()
	default:
		return nil, false, fmt.Errorf("submit %s: policy gave unknown action %q", id, v.Action)
	}
	e.Status, _ = ev.Target()
	e.DecidedBy = cmp.Or(v.DecidedBy, DecidedByPolicy)
	e.LastTransition = &Transition{Event: ev, To: e.Status, Actor: "policy", Reason: v.Reason, DecidedBy: e.DecidedBy, At: now.UnixMilli(), Write: writeID()}
	if err := m.seal(e); err != nil {
		return nil, false, fmt.Errorf("submit %s: %w", id, err)
	}
	if st := claimStep(e, now, claimant); st != nil {
		if err := m.follow(e, now, st); err != nil {
			return nil, false, fmt.Errorf("submit %s: %w", id, err)
		}
	}
	if _, err := m.store.Create(ctx, e); errors.Is(err, ErrExists) {
		// A retry of the same call raced us to it: theirs stands.
		existing, _, err := m.store.Get(ctx, id)
		if err != nil {
			return nil, false, fmt.Errorf("submit %s: %w", id, err)
		}
		return sameCall(existing, c)
	} else if err != nil {
		return nil, false, fmt.Errorf("submit %s: %w", id, err)
	}
	m.observe(ctx, e)
	return e, true, nil
}

// sameCall is SameCall for SubmitOnce: an answer that created nothing.
func sameCall(e *Entry, c Call) (*Entry, bool, error) {
	e, err := SameCall(e, c)
	return e, false, err
}

// SameCall returns e, the entry already under a submitted call's id, if
// it is that call: same caller, tool and arguments (as first submitted,
// before any approver's edit); else ErrIdempotencyConflict.
func SameCall(e *Entry, c Call) (*Entry, error) {
	id := e.PendingID
	args := e.ToolArguments
	if e.OriginalArguments != nil {
		args = e.OriginalArguments
	}
	var differs []string
	if e.CallerBotID != c.CallerBotID {
		differs = append(differs, fmt.Sprintf("callerBotId %q, not %q", e.CallerBotID, c.CallerBotID))
	}
	if e.ToolName != c.ToolName {
		differs = append(differs, fmt.Sprintf("toolName %q, not %q", e.ToolName, c.ToolName))
	}
	if !SameJSON(args, c.Arguments) {
		differs = append(differs, "other toolArguments")
	}
	if len(differs) > 0 {
		return nil, fmt.Errorf("submit %s: %w: it was %s", id, ErrIdempotencyConflict, strings.Join(differs, ", "))
	}
	return e, nil
}

// SameJSON reports whether two JSON documents say the same, however spaced
// or ordered; an absent document is the empty object.
func SameJSON(a, b json.RawMessage) bool {
	var x, y any
	if len(a) == 0 {
		a = json.RawMessage("{}")
	}
	if len(b) == 0 {
		b = json.RawMessage("{}")
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func (m *Machine) observe(ctx context.Context, e *Entry) {
	if m.observer != nil {
		m.observer(ctx, e)
	}
}

// Get returns one entry.
func (m *Machine) Get(ctx context.Context, pendingID string) (*Entry, error) {
	e, _, err := m.store.Get(ctx, pendingID)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", pendingID, err)
	}
	return e, nil
}

// ListConversation returns every entry of one conversation.
func (m *Machine) ListConversation(ctx context.Context, conversationID string) ([]*Entry, error) {
	return m.store.ListConversation(ctx, conversationID)
}

// Decision is a human's answer to a pending call.
type Decision struct {
	Approve bool
	By      string // the user deciding
	Reason  string
	// Scope of an approval; empty means once.
	Scope Scope
	// Arguments, when set on an approval, replace the call's arguments;
	// the original ones are kept in OriginalArguments.
	Arguments json.RawMessage
	// For bounds the grant a session or always approval records: it
	// expires this long after the decision (0: until revoked).
	For time.Duration
	// PersistRule writes an always approval into the team's policy as an
	// allow rule instead of recording a grant (only an admin may ask).
	PersistRule bool
	// SingleUse makes the grant a session or always approval records
	// good for one call.
	SingleUse bool
	// DecidedBy is what decided, when not a human approver (the default):
	// an agent's classifier or a channel relaying its own prompt.
	DecidedBy Decider
	// RequestID, when set, is the decision's write id (Transition.Write)
	// whatever the times it is sent, so that one sent again after its
	// answer was lost can tell the write it made (Entry.WrittenBy).
	RequestID string
	// Claim, when set, is the executor an approval that makes the call
	// runnable at once claims it for, in the same write.
	Claim *Claimant

	// Result, when set, answers the call with the tool's result instead
	// of deciding whether it runs (a respondable call's, decisions.go):
	// the call ends COMPLETED_SUCCESS with it, and never runs.
	Result json.RawMessage
	// Interrupt, on a rejection, asks the agent to stop its turn, not
	// only this call.
	Interrupt bool
}

// Claimant is an executor waiting for work that a command making a call
// runnable claims the call for in its own write (as Claim would, to
// EXECUTING), so that the call starts with no second write between.
type Claimant struct {
	Holder string
	Lease  time.Duration
}

// claimStep is the claim for c of a call a command has just made
// runnable at now: nil when there is none to make (no claimant, or a
// call not runnable at once, which stays runnable).
func claimStep(e *Entry, now time.Time, c *Claimant) *step {
	if c == nil || c.Holder == "" || c.Lease <= 0 || (e.Status != StateApproved && e.Status != StateScheduled) || !e.Runnable(now) {
		return nil
	}
	return &step{ev: EventStart, actor: c.Holder, apply: claim(c.Holder, c.Lease, func(*Entry) (Event, string) { return EventStart, "" })}
}

// Decide approves or rejects a pending call. Only the call's named approver,
// if it has one, may decide, and never the agent that asked.
func (m *Machine) Decide(ctx context.Context, pendingID string, d Decision) (*Entry, error) {
	if d.By == "" {
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("by: who decides is required"))
	}
	ev := EventReject
	if d.Approve {
		ev = EventApprove
	}
	if !validRequestID(d.RequestID) {
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("requestId: at most 64 letters, digits, '-' or '_', got %q", d.RequestID))
	}
	switch d.DecidedBy {
	case "", DecidedByHuman, DecidedByClassifier, DecidedByChannel, DecidedByReviewer:
	default:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("decidedBy: a human, a classifier, a channel or a reviewer decides, got %q", d.DecidedBy))
	}
	// A reviewer's decision settles the call or is refused: it is no
	// vote of a quorum, and no approver list names it (mayReview).
	reviewer := d.DecidedBy == DecidedByReviewer
	switch d.Scope {
	case "", ScopeOnce, ScopeTask, ScopeSession, ScopeAlways:
	default:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("scope: must be once, task, session or always, got %q", d.Scope))
	}
	switch {
	case d.For < 0:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("for: must be positive, got %v", d.For))
	case d.For > 0 && (d.Scope == "" || d.Scope == ScopeOnce):
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("for: bounds a task, session or always grant; scope %s records none", cmp.Or(d.Scope, ScopeOnce)))
	case d.PersistRule && d.Scope != ScopeAlways:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("persistRule: writes an always approval into the policy; scope is %s", cmp.Or(d.Scope, ScopeOnce)))
	case d.SingleUse && (d.Scope == "" || d.Scope == ScopeOnce || d.PersistRule):
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("singleUse: makes a task, session or always grant good for one call; scope %s records none", cmp.Or(d.Scope, ScopeOnce)))
	case d.PersistRule && d.For > 0:
		return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("persistRule: a rule in the policy has no expiry; leave out for"))
	}
	if err := d.checkAnswer(); err != nil {
		return nil, fmt.Errorf("decide %s: %w", pendingID, err)
	}
	if len(d.Result) > 0 {
		ev = EventRespond
	}
	if len(d.Arguments) > 0 {
		if !d.Approve {
			return nil, fmt.Errorf("decide %s: %w", pendingID, invalidf("arguments: only an approval may edit them"))
		}
		if err := validArguments(d.Arguments); err != nil {
			return nil, fmt.Errorf("decide %s: %w", pendingID, err)
		}
	}
	// Under a quorum, a decision that does not settle the call is a vote.
	choose := func(cur *Entry) (Event, string) {
		if cur.Quorum == nil || ev == EventRespond || reviewer || (d.Approve && cur.Approvals()+1 >= cur.Quorum.Required) || (!d.Approve && cur.rejectsNow()) {
			return ev, d.Reason
		}
		return EventVote, d.Reason
	}
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, choose, d.By, func(e *Entry, now time.Time) error {
		if reviewer {
			if err := e.mayReview(d); err != nil {
				return err
			}
		} else if err := e.mayDecide(d.By); err != nil {
			return err
		}
		if d.RequestID != "" {
			e.LastTransition.Write = d.RequestID
		}
		if d.Scope == ScopeTask && e.TaskID == "" {
			return invalidf("scope task: the call names no task (it was submitted without a taskId)")
		}
		// A decision after the deadline of a call its policy rejects then
		// is refused, timer or no timer: the agent may already have been
		// told it timed out, or is about to be.
		if e.decidedAtDeadline() && e.ApprovalTimeoutAt > 0 && now.UnixMilli() >= e.ApprovalTimeoutAt {
			return fmt.Errorf("%w at %s", ErrExpired, time.UnixMilli(e.ApprovalTimeoutAt).UTC().Format(time.RFC3339))
		}
		if e.LastTransition.Event == EventRespond {
			return e.respond(d, now)
		}
		if e.Quorum != nil && !reviewer {
			if err := e.castVote(d, now); err != nil {
				return err
			}
			if e.LastTransition.Event == EventVote {
				return nil // pending still: nobody has decided the call yet
			}
		}
		e.ApprovedOrRejectedByUserID = d.By
		e.DecisionTime = now.UnixMilli()
		e.LastTransition.DecidedBy = cmp.Or(d.DecidedBy, DecidedByHuman)
		if e.Quorum != nil && d.Approve {
			e.LastTransition.DecidedBy = DecidedByQuorum
		}
		if d.Approve {
			e.DecisionScope = cmp.Or(d.Scope, ScopeOnce)
		}
		if d.Interrupt && e.LastTransition.Event == EventReject {
			e.Interrupt, e.LastTransition.Interrupt = true, true
		}
		if len(d.Arguments) > 0 {
			risk, description, err := m.checkEdit(ctx, e, d)
			if err != nil {
				return err
			}
			// The entry describes the call that runs: the edited one's risk
			// and description.
			e.Risk, e.Description = risk, description
			if e.OriginalArguments == nil {
				e.OriginalArguments = e.ToolArguments
			}
			e.ToolArguments = d.Arguments
			e.ArgumentsDigest = ArgumentsDigest(d.Arguments)
			e.LastTransition.Edit = e.Edited()
		}
		return nil
	}, d.Claim)
	if err != nil {
		return nil, fmt.Errorf("decide %s: %w", pendingID, err)
	}
	return e, nil
}

// checkEdit asks the policy what the call e would need with the edited
// arguments of d: one a deny rule matches (or whose tool may not be
// edited) is refused, and one that would be asked about needs an approver
// its policy names, as the call submitted so would. It returns the
// edited call's risk and description. Without an EditChecker, it returns
// the entry's risk as it was and no description: the one the entry has
// tells of the arguments before the edit.
func (m *Machine) checkEdit(ctx context.Context, e *Entry, d Decision) (Risk, string, error) {
	ec, ok := m.eval.(EditChecker)
	if !ok {
		return e.Risk, "", nil
	}
	c := e.Call()
	c.Arguments = d.Arguments
	v, err := ec.CheckEdit(ctx, c)
	if err != nil {
		return "", "", err
	}
	switch {
	case v.Action == ActionDeny:
		return "", "", fmt.Errorf("%w: the edited call is denied by %s", ErrEditDenied, v.Reason)
	case v.Action != ActionAsk:
	case v.Approver != "" && v.Approver != d.By:
		return "", "", fmt.Errorf("%w: the edited call may be approved only by %s, not %s (%s)", ErrForbidden, v.Approver, d.By, v.Reason)
	case len(v.Approvers) > 0 && !slices.Contains(v.Approvers, d.By):
		return "", "", fmt.Errorf("%w: the edited call may be approved only by one of %v, not %s (%s)", ErrForbidden, v.Approvers, d.By, v.Reason)
	}
	return v.Risk, v.Description, nil
}

// Claim hands a runnable call to the executor holder for lease: approved,
// scheduled and due, or running under a lease that has run out. A live
// lease is never claimed, not even by its holder: a claim asked twice
// must not start a second run. Each claim is an attempt, and none is
// granted past the call's MaxExecutionAttempts.
func (m *Machine) Claim(ctx context.Context, pendingID, holder string, lease time.Duration) (*Entry, error) {
	return m.ClaimAt(ctx, pendingID, 0, holder, lease)
}

// ClaimAt is Claim from revision, as the claimant last saw the entry: the
// entry as the store remembers it at that revision, if it does, spares a
// read.
func (m *Machine) ClaimAt(ctx context.Context, pendingID string, revision uint64, holder string, lease time.Duration) (*Entry, error) {
	if holder == "" || lease <= 0 {
		return nil, fmt.Errorf("claim %s: %w", pendingID, invalidf("holder and a positive lease are required"))
	}
	// A running call is reclaimed, anything else started: the event is
	// chosen from the entry as each attempt of the write reads it.
	claimEvent := func(cur *Entry) (Event, string) {
		if cur.Status == StateExecuting {
			return EventReclaim, ""
		}
		return EventStart, ""
	}
	e, err := m.transitionFrom(ctx, pendingID, revision, claimEvent, holder, claim(holder, lease, claimEvent), nil)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", pendingID, err)
	}
	return e, nil
}

// claim is a claim's check and change of the entry, for holder's lease:
// one more attempt, of a call that is runnable or whose lease ran out.
func claim(holder string, lease time.Duration, claimEvent func(*Entry) (Event, string)) func(e *Entry, now time.Time) error {
	return func(e *Entry, now time.Time) error {
		reclaimable := e.Lease != nil && now.UnixMilli() >= e.Lease.ExpiresAt && e.AttemptsLeft() > 0
		if !e.Runnable(now) && !reclaimable {
			ev, _ := claimEvent(e)
			return &TransitionError{Event: ev, Entry: e}
		}
		e.ExecutionAttempts++
		e.LastAttemptTime = now.UnixMilli()
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}
}

// Retry starts another attempt of a call whose attempt failed, for the
// holder of its lease: attempts + 1 and a fresh lease. failed is the
// attempt that failed; a retry for any other is refused, so that only the
// run that failed can follow itself.
func (m *Machine) Retry(ctx context.Context, pendingID, holder string, failed int, lease time.Duration) (*Entry, error) {
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return EventReclaim, "retry" }, holder, func(e *Entry, now time.Time) error {
		if e.Lease == nil || e.Lease.Holder != holder || e.ExecutionAttempts != failed || e.AttemptsLeft() == 0 {
			return &TransitionError{Event: EventReclaim, Entry: e}
		}
		e.ExecutionAttempts++
		e.LastAttemptTime = now.UnixMilli()
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", pendingID, err)
	}
	return e, nil
}

// Outcome is what an executor reports when a call finishes.
type Outcome struct {
	Holder string // the executor holding the lease
	Result json.RawMessage
	Error  string
	Cost   float64
}

// Complete records a successful run.
func (m *Machine) Complete(ctx context.Context, pendingID string, o Outcome) (*Entry, error) {
	return m.finish(ctx, pendingID, EventSucceed, o)
}

// Fail records a failed run.
func (m *Machine) Fail(ctx context.Context, pendingID string, o Outcome) (*Entry, error) {
	return m.finish(ctx, pendingID, EventFail, o)
}

func (m *Machine) finish(ctx context.Context, pendingID string, ev Event, o Outcome) (*Entry, error) {
	if o.Cost < 0 {
		return nil, fmt.Errorf("%s %s: %w", ev, pendingID, invalidf("cost: must be >= 0, got %v", o.Cost))
	}
	if len(o.Result) > 0 && !json.Valid(o.Result) {
		return nil, fmt.Errorf("%s %s: %w", ev, pendingID, invalidf("result: not valid JSON"))
	}
	// The executor's claim (or its last heartbeat) was most likely
	// written here: start from it.
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return ev, o.Error }, o.Holder, func(e *Entry, now time.Time) error {
		// An executor whose lease ran out and was reclaimed must not
		// overwrite the run that replaced it.
		if e.Lease != nil && e.Lease.Holder != o.Holder {
			return &TransitionError{Event: ev, Entry: e}
		}
		e.Lease = nil
		e.Result = o.Result
		e.Error = o.Error
		e.Cost = o.Cost
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", ev, pendingID, err)
	}
	return e, nil
}

// Cancel stops a call that has not started running.
func (m *Machine) Cancel(ctx context.Context, pendingID, by, reason string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventCancel, by, reason, nil)
	if err != nil {
		return nil, fmt.Errorf("cancel %s: %w", pendingID, err)
	}
	return e, nil
}

// Expire handles a pending call whose approval deadline has passed: it is
// rejected (REJECTED_BY_TIMEOUT) when its policy says autoRejectOnTimeout,
// cancelled or approved when its onTimeout says so (an approval only when
// the call may still be approved so, else rejected, saying why: see
// timeoutApproval), and otherwise flagged overdue, once, and left
// pending. Each outcome but the flag is the timer's decision
// (DecidedByTimeout).
func (m *Machine) Expire(ctx context.Context, pendingID string) (*Entry, error) {
	expireEvent := func(cur *Entry) (Event, string) {
		switch {
		case cur.OnTimeout == TimeoutCancel:
			return EventCancel, "approval timed out: cancelled (onTimeout cancel)"
		case cur.OnTimeout == TimeoutApprove:
			if why := m.timeoutApproval(ctx, cur); why != "" {
				return EventTimeout, "approval timed out: rejected, not approved as onTimeout says, because " + why
			}
			return EventApprove, "approval timed out: approved (onTimeout approve)"
		case cur.AutoRejectOnTimeout:
			return EventTimeout, "approval timed out"
		}
		return EventOverdue, "approval overdue, kept pending"
	}
	e, err := m.transitionBy(ctx, pendingID, expireEvent, "timer", func(e *Entry, now time.Time) error {
		// A timer whose clock runs ahead must not reject what a human
		// still has time to answer; a call is flagged overdue only once.
		ev := e.LastTransition.Event
		if now.UnixMilli() < e.ApprovalTimeoutAt || (ev == EventOverdue && e.Overdue) || e.Status != StatePendingApproval {
			return &TransitionError{Event: ev, Entry: e}
		}
		if ev != EventOverdue {
			e.DecisionTime = now.UnixMilli()
			e.LastTransition.DecidedBy = DecidedByTimeout
		}
		switch ev {
		case EventTimeout:
			if again := m.resubmitted(ctx, e); again != "" {
				e.LastTransition.Reason += "; " + again
			}
		case EventApprove:
			e.DecisionScope = ScopeOnce
		}
		e.Overdue = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expire %s: %w", pendingID, err)
	}
	return e, nil
}

// resubmitted says what the call e would meet if its agent submitted it
// again now, for the agent told it timed out: asked again, run, or
// denied, and by what. It says nothing when the policy cannot tell
// without side effects.
func (m *Machine) resubmitted(ctx context.Context, e *Entry) string {
	ec, ok := m.eval.(EditChecker)
	if !ok {
		return ""
	}
	v, err := ec.EvaluateDry(ctx, e.Call())
	if err != nil {
		return ""
	}
	switch v.Action {
	case ActionAsk:
		return "a resubmit would be asked again (" + v.Reason + ")"
	case ActionDeny:
		return "a resubmit would be denied (" + v.Reason + ")"
	default:
		return "a resubmit would run without asking (" + v.Reason + ")"
	}
}

// Remind marks a call still pending approval as reminded, once, at its
// reminderAt: the event it publishes tells its approvers again before the
// deadline. A call decided, or reminded, before is left alone.
func (m *Machine) Remind(ctx context.Context, pendingID string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventRemind, "timer", "approval deadline approaching", func(e *Entry, now time.Time) error {
		if e.Reminded || e.ReminderAt == 0 || now.UnixMilli() < e.ReminderAt {
			return &TransitionError{Event: EventRemind, Entry: e}
		}
		e.Reminded = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("remind %s: %w", pendingID, err)
	}
	return e, nil
}

// Heartbeat renews the lease of the executor running a call. A lease that
// has run out is not renewed: the timer may have queued the call for
// another executor already, and the holder must stop.
func (m *Machine) Heartbeat(ctx context.Context, pendingID, holder string, lease time.Duration) (*Entry, error) {
	e, err := m.transitionFrom(ctx, pendingID, latestRemembered, func(*Entry) (Event, string) { return EventHeartbeat, "" }, holder, func(e *Entry, now time.Time) error {
		if e.Lease == nil || e.Lease.Holder != holder || now.UnixMilli() >= e.Lease.ExpiresAt {
			return &TransitionError{Event: EventHeartbeat, Entry: e}
		}
		e.Lease = &Lease{Holder: holder, ExpiresAt: now.Add(lease).UnixMilli()}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", pendingID, err)
	}
	return e, nil
}

// DefaultMaxExecutionAttempts bounds the claims of a call whose policy
// does not say.
const DefaultMaxExecutionAttempts = 3

// AttemptsLeft reports how many more times e may be claimed.
func (e *Entry) AttemptsLeft() int {
	limit := e.MaxExecutionAttempts
	if limit <= 0 {
		limit = DefaultMaxExecutionAttempts
	}
	return max(limit-e.ExecutionAttempts, 0)
}

// AbandonLease fails a running call whose executor's lease ran out after
// its last allowed attempt. (With attempts left, the call is queued again
// instead, and the next executor reclaims it.)
func (m *Machine) AbandonLease(ctx context.Context, pendingID string) (*Entry, error) {
	e, err := m.transition(ctx, pendingID, EventFail, "timer", "", func(e *Entry, now time.Time) error {
		if e.Lease == nil || now.UnixMilli() < e.Lease.ExpiresAt || e.AttemptsLeft() > 0 {
			return &TransitionError{Event: EventFail, Entry: e}
		}
		e.Error = fmt.Sprintf("executor %s lost its lease on attempt %d, the last allowed", e.Lease.Holder, e.ExecutionAttempts)
		e.Lease = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("abandon %s: %w", pendingID, err)
	}
	return e, nil
}

// transition is the one way an entry changes: read it with its revision,
// validate ev against its state, apply the change, and write it back only if
// nobody wrote in between. When somebody did, read again and start over, so
// the event is validated against what the entry is now: of an approval and a
// timeout racing, exactly one wins and the other gets a TransitionError that
// names the winner.
func (m *Machine) transition(ctx context.Context, pendingID string, ev Event, actor, reason string, apply func(e *Entry, now time.Time) error) (*Entry, error) {
	return m.transitionBy(ctx, pendingID, func(*Entry) (Event, string) { return ev, reason }, actor, apply)
}

// transitionBy is transition for a command whose event (and the reason it
// records) depends on the entry as it is read: each attempt chooses again.
// It starts from the latest revision the store remembers, if any (a
// RecentStore: the entry it wrote last, or its index's).
func (m *Machine) transitionBy(ctx context.Context, pendingID string, choose func(cur *Entry) (Event, string), actor string, apply func(e *Entry, now time.Time) error) (*Entry, error) {
	return m.transitionFrom(ctx, pendingID, latestRemembered, choose, actor, apply, nil)
}

// step is a transition that follows another in the same write.
type step struct {
	ev    Event
	actor string
	apply func(e *Entry, now time.Time) error
}

// latestRemembered, as transitionFrom's hint, starts from the latest
// revision the store remembers, whatever it is: for a command most likely
// made where the entry was last written (an executor's report after its
// claim).
const latestRemembered = ^uint64(0)

// transitionFrom is transitionBy for a command that names the revision
// it expects the entry at (a claim's), or latestRemembered: when the
// store remembers the entry at that revision (a RecentStore), the first
// attempt starts from it rather than from a read. Compare-and-set on that revision makes it
// safe: the write lands only if the entry is still what was remembered,
// and anything the remembered entry refuses is asked again of a fresh
// read, since a refusal takes no write to check it.
//
// claimant, when set, is whom the transition claims the call for in the
// same write, when it makes it runnable (Claimant).
func (m *Machine) transitionFrom(ctx context.Context, pendingID string, hint uint64, choose func(cur *Entry) (Event, string), actor string, apply func(e *Entry, now time.Time) error, claimant *Claimant) (*Entry, error) {
	recent, _ := m.store.(RecentStore)
	// attempted is the write id of a write refused as a conflict: one
	// whose first answer was lost, and that was asked again, may have
	// landed after all, which the entry read again tells.
	attempted := ""
	for {
		var (
			cur    *Entry
			rev    uint64
			cached bool
			err    error
		)
		switch {
		case recent == nil || hint == 0:
		case hint == latestRemembered:
			cur, rev, cached = recent.Latest(pendingID)
		default:
			cur, cached = recent.Recent(pendingID, hint)
			rev = hint
		}
		hint = 0
		if !cached {
			if cur, rev, err = m.store.Get(ctx, pendingID); err != nil {
				return nil, err
			}
		}
		if attempted != "" && cur.LastTransition != nil && cur.LastTransition.Write == attempted {
			m.observe(ctx, cur)
			return cur, nil
		}
		ev, reason := choose(cur)
		to, err := validate(cur.Status, ev)
		if err != nil {
			if cached {
				continue
			}
			if errors.Is(err, ErrInvalidTransition) {
				return nil, &TransitionError{Event: ev, Entry: cur}
			}
			return nil, err
		}
		now := m.now()
		next := *cur
		next.PriorTransition = nil
		next.LastTransition = &Transition{Event: ev, From: cur.Status, To: to, Actor: actor, Reason: reason, At: now.UnixMilli(), Write: writeID()}
		// apply sees the entry still in its current state, to check what
		// the event alone cannot (a lease, a deadline, who may decide),
		// with the transition being made as its LastTransition (whose
		// reason it may add to).
		if apply != nil {
			if err := apply(&next, now); err != nil {
				if cached {
					continue
				}
				// A refusal names the entry as stored, not as the
				// refused transition would have left it.
				if te := (*TransitionError)(nil); errors.As(err, &te) && te.Entry == &next {
					te.Entry = cur
				}
				return nil, err
			}
		}
		next.Status = to
		next.StatusReason = next.LastTransition.Reason
		next.DecidedBy = cmp.Or(next.LastTransition.DecidedBy, next.DecidedBy)
		if err := m.seal(&next); err != nil {
			return nil, err
		}
		if st := claimStep(&next, now, claimant); st != nil {
			if err := m.follow(&next, now, st); err != nil {
				return nil, err
			}
		}
		if _, err := m.store.Update(ctx, &next, rev); errors.Is(err, ErrConflict) {
			attempted = next.LastTransition.Write
			continue
		} else if err != nil {
			return nil, err
		}
		m.observe(ctx, &next)
		return &next, nil
	}
}

// follow makes st on e, after the transition e records, in the same
// write: LastTransition becomes st's, PriorTransition the one before. A
// step that e's state or st.apply refuses leaves e as it was.
func (m *Machine) follow(e *Entry, now time.Time, st *step) error {
	to, err := validate(e.Status, st.ev)
	if err != nil {
		return nil
	}
	next := *e
	first := e.LastTransition
	next.LastTransition = &Transition{Event: st.ev, From: e.Status, To: to, Actor: st.actor, At: now.UnixMilli(), Write: first.Write}
	if st.apply(&next, now) != nil {
		return nil
	}
	next.Status = to
	next.StatusReason = next.LastTransition.Reason
	next.PriorTransition = first
	if err := m.seal(&next); err != nil {
		return err
	}
	*e = next
	return nil
}

var fsmEvents = func() []fsm.EventDesc {
	var descs []fsm.EventDesc
	for _, t := range transitions {
		src := make([]string, len(t.From))
		for i, s := range t.From {
			src[i] = string(s)
		}
		descs = append(descs, fsm.EventDesc{Name: string(t.Event), Src: src, Dst: string(t.To)})
	}
	return descs
}()

// validate says whether ev may follow from, and where it leads, as
// looplab/fsm answers over the transition table: fsmTable holds its
// answer for every state and event, asked once.
func validate(from State, ev Event) (State, error) {
	if to, ok := fsmTable[from][ev]; ok {
		return to, nil
	}
	return "", ErrInvalidTransition
}

// fsmTable is where each event leads from each state (and from stateNone,
// before an entry exists), as looplab/fsm says, for the events it allows
// there. Each answer comes from an FSM built fresh in that state: a
// shared long-lived one would hold state that is not the store's, and
// building one for every command was 3% of a lifecycle's CPU.
var fsmTable = func() map[State]map[Event]State {
	table := map[State]map[Event]State{}
	for _, from := range append([]State{stateNone}, States...) {
		table[from] = map[Event]State{}
		for _, t := range transitions {
			f := fsm.NewFSM(string(from), fsmEvents, nil)
			err := f.Event(context.Background(), string(t.Event))
			var noTransition fsm.NoTransitionError
			if err == nil || errors.As(err, &noTransition) && noTransition.Err == nil {
				table[from][t.Event] = State(f.Current())
			}
		}
	}
	return table
}()

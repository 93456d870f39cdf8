package gate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Submit evaluates the policy for c and records its entry; submitting the
// same call again returns the entry already there. An agent submits as
// itself: it cannot ask on another's behalf, nor so make itself the
// approver of its own call.
func (s *Service) Submit(ctx context.Context, a Actor, c machine.Call) (*machine.Entry, error) {
	e, _, err := s.SubmitOnce(ctx, a, c)
	return e, err
}

// SubmitOnce is Submit, and reports whether this submit created the
// entry (false: it answers with the entry an earlier one created). Not
// of a use case's shape: HTTP answers a new entry 201, a retry 200.
func (s *Service) SubmitOnce(ctx context.Context, a Actor, c machine.Call) (*machine.Entry, bool, error) {
	return s.submitOnce(ctx, a, c, nil)
}

// submitOnce is SubmitOnce. A call the policy lets run at once is
// claimed in the same write for holder when it is given, else for an
// executor whose request for work of its tool waits here, if one does.
func (s *Service) submitOnce(ctx context.Context, a Actor, c machine.Call, holder *machine.Claimant) (*machine.Entry, bool, error) {
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
	claimer := &claimer{s: s} // claims for nobody
	if holder == nil {
		claimer = s.claimer(c.ToolName)
		holder = claimer.claimant()
	}
	e, created, err := s.m.SubmitAndClaim(ctx, c, holder)
	claimer.settle(e, err == nil && created)
	if err == nil && created {
		s.compareShadow(ctx, e) // enforces nothing, changes nothing
	}
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
// there. Not of a use case's shape: it is Get with the revision, which
// a transport answers beside the entry (a NATS header).
func (s *Service) Read(ctx context.Context, a Actor, r wire.GetRequest) (*machine.Entry, uint64, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, 0, err
	}
	return s.readShown(ctx, a, r.PendingID)
}

// latest is the call pendingID as this process last saw it, its index's
// or its own last write, or else as read from tool_calls: for what of a
// call no transition since can change (its tool, its call), where a read
// of the bucket would only cost time.
func (s *Service) latest(ctx context.Context, pendingID string) (*machine.Entry, error) {
	if e, _, ok := s.calls.Latest(pendingID); ok {
		return e, nil
	}
	e, _, err := s.calls.Get(ctx, pendingID)
	return e, err
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

// History returns the transitions an entry went through, oldest first,
// and, among them, whenever someone was shown its arguments in clear
// (Reveal).
func (s *Service) History(ctx context.Context, a Actor, r wire.GetRequest) ([]wire.HistoryItem, error) {
	if _, _, err := s.Read(ctx, a, r); err != nil {
		return nil, err
	}
	pendingID := r.PendingID
	items, err := s.calls.History(ctx, pendingID)
	if len(items) == 0 && (err == nil || isNotFound(err)) {
		// Read found it, so it was retired: the archive has its history.
		if c, aerr := s.archived(ctx, pendingID); aerr == nil {
			items, err = archivedHistory(c), nil
		}
	}
	if err != nil {
		return items, err
	}
	return s.withReveals(ctx, pendingID, items)
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

// Page is List's page with the sequence of the last event of TOOL_EVENTS,
// read before the entries: a client that then follows the events from it
// misses no change to them (0 without Config.Events: it then follows
// every event, and misses none either).
func (s *Service) Page(ctx context.Context, a Actor, r wire.ListRequest) (wire.ListPage, error) {
	var seq uint64
	if s.events != nil {
		var err error
		if seq, err = s.events.LastSeq(ctx); err != nil {
			return wire.ListPage{}, fmt.Errorf("events: %w", err)
		}
	}
	page, err := s.List(ctx, a, r)
	return wire.ListPage{ListReply: page, EventsSeq: seq}, err
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
		For: time.Duration(r.ForMs) * time.Millisecond, PersistRule: r.PersistRule, SingleUse: r.SingleUse, GrantMatch: r.GrantMatch,
		RequestID: r.RequestID, Result: r.Result, Interrupt: r.Interrupt,
	})
}

// Respond is Decide of the call r.PendingID of the conversation
// r.ConversationID, as the reference design decides: a call of another
// conversation is not found.
func (s *Service) Respond(ctx context.Context, a Actor, r wire.RespondRequest) (*machine.Entry, error) {
	if err := required("conversationId", r.ConversationID); err != nil {
		return nil, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	e, err := s.Get(ctx, a, wire.GetRequest{PendingID: r.PendingID})
	if err != nil {
		return nil, err
	}
	if e.ConversationID != r.ConversationID {
		return nil, fmt.Errorf("pendingId %s in conversation %s: %w", r.PendingID, r.ConversationID, machine.ErrNotFound)
	}
	return s.Decide(ctx, a, wire.DecideRequest{PendingID: r.PendingID, Approved: r.Approved, Reason: r.Reason})
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
	d.By, d.Identity, d.Groups = by, a.Identity, a.Groups
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
	if err := s.grantable(ctx, a, pendingID, d); err != nil {
		return nil, err
	}
	if d.Result != nil {
		// An answer completes the call as a run would: the flows in
		// force mark it first (see complete).
		if err := s.markFlows(ctx, pendingID); err != nil {
			return nil, err
		}
	}
	tool := ""
	if d.Approve {
		tool = s.toolOf(ctx, pendingID) // only an approval makes a call runnable
	}
	c := s.claimer(tool)
	d.Claim = c.claimant()
	e, err := s.observe(s.m.Decide(ctx, pendingID, d))
	c.settle(e, err == nil)
	if err != nil && d.RequestID != "" {
		// Sent again after its answer was lost: the answer is the
		// entry the first one wrote.
		if cur, _, gerr := s.calls.Get(ctx, pendingID); gerr == nil && cur.WrittenBy(d.RequestID, d.By) {
			e, err = cur, nil
		}
	}
	if errors.Is(err, machine.ErrExpired) {
		// The deadline passed and no timer has acted on it yet: act now,
		// so the refused approver and the agent see the same outcome.
		if _, xerr := s.Timer().Expire(ctx, pendingID); xerr != nil && !errors.Is(xerr, machine.ErrConflict) {
			s.log.Warn("expiring a call past its deadline failed", "pendingId", pendingID, "err", xerr)
		}
	}
	if err != nil {
		return nil, s.shownErr(a, err)
	}
	if err := s.recordScope(ctx, e, d); err != nil {
		// The decision stands; its reach beyond this call is not
		// recorded, and nobody may be told it is. The same decision
		// sent again with its requestId records it.
		s.log.Error("recording the decision's scope failed", "pendingId", e.PendingID, "scope", e.DecisionScope, "err", err)
		return nil, fmt.Errorf("decide %s: %w: approved, but the %s grant was not recorded (%v); send the decision again with the same requestId to record it",
			pendingID, wire.ErrUnavailable, e.DecisionScope, err)
	}
	return s.shown(a, e), nil
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
		if err := s.conn.Publish(wire.CancelSubject, data); err != nil {
			return nil, fmt.Errorf("announce cancel of %s: %w", conversationID, err)
		}
	}
	s.shownAll(a, reply.Cancelled)
	s.shownAll(a, reply.Running)
	return reply, nil
}

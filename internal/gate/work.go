package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
)

// claimRetry is how long a call whose claim was refused, though the
// queue had it as runnable (a lease renewed just now, toolgate's clocks a
// little apart, the bucket ahead of the queue's view of it), waits at
// first before it is offered again (views.WorkQueue.Refused).
const claimRetry = 100 * time.Millisecond

// answerGrace is how long after a claim TakeWork takes its answer to
// have reached the executor, if it ever does: a call claimed longer ago,
// running under the executor's lease and not among those it says it has
// in hand, is handed to it again.
const answerGrace = 2 * time.Second

// TakeWork claims runnable calls of r.Tools for an executor, the oldest
// first: up to r.Max, waiting up to r.WaitMs for one when none is. Each
// claim is the compare-and-set a claim through toolgate.started makes,
// from the revision the queue holds, so a call that moved on meanwhile
// (decided otherwise, cancelled, claimed through another process) is
// skipped. What it answers is claimed: an answer lost on its way is
// handed again to the same executor by a later request (r.Running), and
// a call whose executor is gone waits out its lease and is offered again.
func (s *Service) TakeWork(ctx context.Context, a Actor, r wire.WorkRequest) (*wire.WorkReply, error) {
	if err := a.require("take work", wire.RoleExecutor); err != nil {
		return nil, err
	}
	if len(r.Tools) == 0 {
		return nil, fmt.Errorf("%w: tools: required", machine.ErrInvalid)
	}
	for _, tool := range r.Tools {
		if !machine.ValidToolName(tool) {
			return nil, fmt.Errorf("%w: tools: %q is not a tool name", machine.ErrInvalid, tool)
		}
	}
	holder := a.holder(r.By)
	if r.Withdraw {
		return &wire.WorkReply{Calls: []wire.WorkClaim{}}, s.withdraw(wire.Withdrawal{Holder: holder, Tools: r.Tools})
	}
	if r.Max == 0 {
		r.Max = 1
	}
	wait := time.Duration(r.WaitMs) * time.Millisecond
	switch {
	case r.Max < 0 || r.Max > wire.MaxWorkBatch:
		return nil, fmt.Errorf("%w: max: %d: want 1 to %d", machine.ErrInvalid, r.Max, wire.MaxWorkBatch)
	case wait < 0 || wait > wire.MaxWorkWait:
		return nil, fmt.Errorf("%w: waitMs: %d: want 0 to %d", machine.ErrInvalid, r.WaitMs, wire.MaxWorkWait.Milliseconds())
	case r.LeaseMs <= 0:
		return nil, fmt.Errorf("%w: leaseMs: %d: a lease must be positive", machine.ErrInvalid, r.LeaseMs)
	}
	lease := time.Duration(r.LeaseMs) * time.Millisecond
	t := s.takers.add(holder, r.Tools, lease)
	reply, err := s.takeWork(ctx, a, r, t, wait)
	// A call a command claimed for this request, in the write that made
	// it runnable (claimer), is answered with the rest.
	if e := s.takers.leave(ctx, t); e != nil {
		if err != nil {
			reply, err = &wire.WorkReply{}, nil
		}
		reply.Calls = append(reply.Calls, s.handedClaim(a, e))
	}
	return reply, err
}

// handedClaim is what an executor is answered of e, claimed for it in
// the write that made it runnable: runnable since that write.
func (s *Service) handedClaim(a Actor, e *machine.Entry) wire.WorkClaim {
	return wire.WorkClaim{Entry: s.shown(a, e), RunnableSince: e.LastAttemptTime}
}

// takeWork is TakeWork for the waiting request t.
func (s *Service) takeWork(ctx context.Context, a Actor, r wire.WorkRequest, t *taker, wait time.Duration) (*wire.WorkReply, error) {
	holder, lease := t.holder, t.lease
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	wake := make(chan struct{}, 1)
	defer s.work.Stop(r.Tools, wake)
	reply := &wire.WorkReply{Calls: []wire.WorkClaim{}}
	// Claims made for this executor whose answer it never had: handed
	// again, before anything new.
	for _, id := range s.work.Held(holder, r.Running, answerGrace) {
		e, _, err := s.calls.Get(ctx, id)
		if err != nil || e.Status != machine.StateExecuting || e.Lease == nil || e.Lease.Holder != holder {
			continue
		}
		if e.Lease.ExpiresAt <= s.now().UnixMilli() {
			// Its lease ran out before the executor asked again: the
			// attempt never started, so it is renewed, not lost.
			if e, err = s.observe(s.m.HandAgain(ctx, id, holder, lease)); err != nil {
				continue
			}
		}
		reply.Calls = append(reply.Calls, wire.WorkClaim{Entry: s.shown(a, e), RunnableSince: e.LastAttemptTime, Again: true})
	}
	if len(reply.Calls) > 0 {
		return reply, nil
	}
	for {
		taken := s.work.Take(r.Tools, r.Max, wake)
		if len(taken) == 0 {
			s.takers.wait(t, true)
			select {
			case <-wake:
				s.takers.wait(t, false)
				continue
			case e := <-t.handed:
				reply.Calls = append(reply.Calls, s.handedClaim(a, e))
			case <-timeout.C:
			case <-t.withdrawn:
			case <-ctx.Done():
			}
			return reply, nil
		}
		select {
		case <-t.withdrawn:
			// Its executor stopped: the calls are another's to claim.
			for _, c := range taken {
				s.work.Failed(c)
			}
			return reply, nil
		default:
		}
		// Claimed at once, not one after another: the first would wait
		// for the last.
		entries, errs := make([]*machine.Entry, len(taken)), make([]error, len(taken))
		var claims sync.WaitGroup
		for i, c := range taken {
			claims.Go(func() { entries[i], errs[i] = s.observe(s.m.ClaimAt(ctx, c.PendingID, c.Revision, holder, lease)) })
		}
		claims.Wait()
		var failed error
		for i, c := range taken {
			e, err := entries[i], errs[i]
			var te *machine.TransitionError
			switch {
			case err == nil:
				if t := e.LastTransition; t != nil && t.Event == machine.EventReclaim && s.mx != nil {
					s.mx.Requeues.WithLabelValues(metrics.RequeueLeaseExpired).Inc()
				}
				reply.Calls = append(reply.Calls, wire.WorkClaim{Entry: s.shown(a, e), RunnableSince: c.Since.UnixMilli()})
			case errors.As(err, &te):
				s.work.Refused(c, te.Entry, claimRetry)
			case errors.Is(err, machine.ErrNotFound):
				s.work.Refused(c, nil, claimRetry)
			default:
				s.work.Failed(c)
				failed = err
			}
		}
		switch {
		case len(reply.Calls) > 0:
			return reply, nil
		case failed != nil:
			return nil, failed
		}
		// Every one moved on: take others.
	}
}

// claimer lets a command that makes a call runnable (a submit the policy
// lets run, an approval) claim it, in its own write, for an executor's
// request for work of its tool that waits at this process: the call
// starts with no second write, nor a trip through the work queue,
// between. The request is reserved before the command, and the command
// is given its holder and lease (machine.Claimant).
type claimer struct {
	s *Service
	t *taker // the request reserved: nil when none waits for the tool
}

// claimer reserves a request waiting for work of tool, if one waits.
func (s *Service) claimer(tool string) *claimer {
	return &claimer{s: s, t: s.takers.reserve(tool)}
}

// claimant is whom the command claims the call for: nil, none.
func (c *claimer) claimant() *machine.Claimant {
	if c.t == nil {
		return nil
	}
	return &machine.Claimant{Holder: c.t.holder, Lease: c.t.lease}
}

// settle ends the reservation once the command is done: the request is
// answered with e if the command wrote e (not another's write it found)
// claimed for it, and waits on otherwise.
func (c *claimer) settle(e *machine.Entry, wrote bool) {
	if c.t == nil {
		return
	}
	if wrote && e.PriorTransition != nil && e.Lease != nil && e.Lease.Holder == c.t.holder {
		handed := *e // each answer masks its own copy
		c.s.takers.handOver(c.t, &handed)
		return
	}
	c.s.takers.handOver(c.t, nil)
}

// toolOf is the tool of the call pendingID when an executor's request
// waits here for some work: what a decision reserves a request for
// (claimer). A call's tool never changes, so any revision tells: the
// one this process's index or last write holds, or else one read. ""
// when no request waits, or the call cannot be read, and the call goes
// through the work queue.
func (s *Service) toolOf(ctx context.Context, pendingID string) string {
	if !s.takers.waiting() {
		return ""
	}
	e, err := s.latest(ctx, pendingID)
	if err != nil {
		return ""
	}
	return e.ToolName
}

// withdraw ends w's requests for work waiting on this process, and tells
// the others (wire.WithdrawSubject): the executor's requests went to any
// of them.
func (s *Service) withdraw(w wire.Withdrawal) error {
	s.takers.withdraw(w.Holder, w.Tools)
	if s.conn == nil {
		return nil
	}
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	return s.conn.Publish(wire.WithdrawSubject, data)
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

// report checks a report of a kind (wire.EndpointStarted, …) on a call:
// its pending id is set, its lease is not negative, and it holds only the
// fields its kind takes (reportFields), so that nothing a caller sends is
// silently ignored.
func report(kind string, r wire.ReportRequest) error {
	if err := required("pendingId", r.PendingID); err != nil {
		return err
	}
	if r.LeaseMs < 0 {
		return fmt.Errorf("%w: leaseMs: want a positive number of milliseconds (or none: an hour), got %d", machine.ErrInvalid, r.LeaseMs)
	}
	takes := reportFields[kind]
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"leaseMs", r.LeaseMs != 0}, {"attempt", r.Attempt != 0}, {"revision", r.Revision != 0},
		{"result", len(r.Result) > 0}, {"error", r.Error != ""}, {"cost", r.Cost != 0}, {"outcomeUnknown", r.OutcomeUnknown},
	} {
		if f.set && !slices.Contains(takes, f.name) {
			return fmt.Errorf("%w: %s: a report of %s takes only %s", machine.ErrInvalid, f.name, kind, strings.Join(takes, ", "))
		}
	}
	return nil
}

// reportFields are the fields of a wire.ReportRequest each kind of report
// takes, beside the pending id and who reports. A failure may carry what
// the tool made before it failed (client.Result's Output beside an error).
var reportFields = map[string][]string{
	wire.EndpointStarted:   {"leaseMs", "revision"},
	wire.EndpointHeartbeat: {"leaseMs"},
	wire.EndpointRetry:     {"leaseMs", "attempt"},
	wire.EndpointSucceeded: {"result", "cost"},
	wire.EndpointFailed:    {"error", "result", "cost", "outcomeUnknown"},
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
	return machine.Outcome{Holder: r.By, Result: r.Result, Error: r.Error, Cost: r.Cost, Unknown: r.OutcomeUnknown}
}

// ClaimAt hands a runnable call to r.By (under a's name) for its lease
// (r.LeaseMs, default an hour), from r.Revision, as the claimant last saw
// the entry (0: unknown): where this process wrote the entry at that
// revision, the claim reads no entry (machine.ClaimAt; an agent's claim
// still reads the call, to check it is its own).
func (s *Service) ClaimAt(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	if err := report(wire.EndpointStarted, r); err != nil {
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
	if err := report(wire.EndpointRetry, r); err != nil {
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
	if err := report(wire.EndpointHeartbeat, r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	return s.answer(a)(s.observe(s.m.Heartbeat(ctx, r.PendingID, a.holder(r.By), leaseOf(r))))
}

// Complete records a successful run: r.Result and r.Cost.
func (s *Service) Complete(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	return s.finish(ctx, a, wire.EndpointSucceeded, r, s.complete) // the machine's, after the flows' marks (flows.go)
}

// Fail records a failed run: r.Error and r.Cost.
func (s *Service) Fail(ctx context.Context, a Actor, r wire.ReportRequest) (*machine.Entry, error) {
	return s.finish(ctx, a, wire.EndpointFailed, r, s.m.Fail)
}

// finish records a run's outcome, a report of kind, with record: the
// machine's Complete or Fail.
func (s *Service) finish(ctx context.Context, a Actor, kind string, r wire.ReportRequest, record func(context.Context, string, machine.Outcome) (*machine.Entry, error)) (*machine.Entry, error) {
	if err := report(kind, r); err != nil {
		return nil, err
	}
	if err := s.runs(ctx, a, r.PendingID); err != nil {
		return nil, err
	}
	o := outcomeOf(r)
	o.Holder = a.holder(o.Holder)
	return s.answer(a)(s.observe(record(ctx, r.PendingID, o)))
}

// takers are the requests for work that wait, by holder, so that their
// executor can end them (wire.WorkRequest.Withdraw), and by tool, so
// that a command looks only at those that may run its call: an executor
// keeps up to 16 a tool.
type takers struct {
	mu     sync.Mutex
	m      map[string]map[*taker]struct{}
	byTool map[string]map[*taker]struct{}
	// gone holds, by holder and tool, when a withdrawal came. Each
	// request is handled on a goroutine of its own, so an executor's
	// request for work sent before its withdrawal may begin after it:
	// one that begins within withdrawalEcho of it is withdrawn at once,
	// and no call is claimed for an executor that stopped.
	gone map[string]map[string]time.Time
}

// withdrawalEcho is how long after a withdrawal a request for work of its
// holder and tools that begins is taken for one sent before it. A new
// executor of the same name that asks within it is answered with nothing
// once, and asks again.
const withdrawalEcho = 5 * time.Second

// taker is one waiting request for work: its tools, and closed when its
// executor withdraws it.
type taker struct {
	holder    string
	tools     []string
	lease     time.Duration
	withdrawn chan struct{}
	// handed brings the call a command claimed for this request in the
	// write that made it runnable (claimer), or nil when the command
	// claimed none and the request is answering.
	handed chan *machine.Entry
	// Under takers.mu: waiting while it waits with nothing taken;
	// reserved while a command claims a call for it; done once it
	// answers or has been handed a call, when no command may take it.
	waiting, reserved, done bool
}

func (ts *takers) add(holder string, tools []string, lease time.Duration) *taker {
	t := &taker{holder: holder, tools: tools, lease: lease, withdrawn: make(chan struct{}), handed: make(chan *machine.Entry, 1)}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.echoed(holder, tools) {
		// Withdrawn already: no command may take it.
		close(t.withdrawn)
		t.done = true
		return t
	}
	if ts.m == nil {
		ts.m, ts.byTool = map[string]map[*taker]struct{}{}, map[string]map[*taker]struct{}{}
	}
	put(ts.m, holder, t)
	for _, tool := range tools {
		put(ts.byTool, tool, t)
	}
	return t
}

// remove forgets t, under ts.mu.
func (ts *takers) remove(t *taker) {
	drop(ts.m, t.holder, t)
	for _, tool := range t.tools {
		drop(ts.byTool, tool, t)
	}
}

func put(m map[string]map[*taker]struct{}, key string, t *taker) {
	if m[key] == nil {
		m[key] = map[*taker]struct{}{}
	}
	m[key][t] = struct{}{}
}

func drop(m map[string]map[*taker]struct{}, key string, t *taker) {
	delete(m[key], t)
	if len(m[key]) == 0 {
		delete(m, key)
	}
}

// leave ends t: no command takes it afterwards. It returns the call a
// command claimed for t and has not been taken from t.handed yet, if
// any: handed already, or, when a command is claiming one now, handed
// with that command's write (unless ctx ends first).
func (ts *takers) leave(ctx context.Context, t *taker) *machine.Entry {
	ts.mu.Lock()
	ts.remove(t)
	t.done = true
	reserved := t.reserved
	ts.mu.Unlock()
	if reserved {
		select {
		case e := <-t.handed:
			return e
		case <-ctx.Done():
			return nil
		}
	}
	select {
	case e := <-t.handed:
		return e
	default:
		return nil
	}
}

// wait marks whether t waits with nothing taken: only then may a command
// take it.
func (ts *takers) wait(t *taker, waiting bool) {
	ts.mu.Lock()
	t.waiting = waiting
	ts.mu.Unlock()
}

// reserve takes a request that waits for work of tool, for a command to
// claim the call it makes runnable for: nil when none waits. The command
// ends the reservation with handOver.
func (ts *takers) reserve(tool string) *taker {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for t := range ts.byTool[tool] {
		if t.waiting && !t.reserved && !t.done {
			t.reserved = true
			return t
		}
	}
	return nil
}

// waiting reports whether any request for work waits here.
func (ts *takers) waiting() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.m) > 0
}

// handOver ends t's reservation: e is the call claimed for it, or nil
// when the command claimed none (t waits on, unless it is answering).
func (ts *takers) handOver(t *taker, e *machine.Entry) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t.reserved = false
	if e != nil || t.done {
		t.done = true
		t.handed <- e // the only send: done keeps t from another reservation
	}
}

// echoed reports whether a withdrawal of holder's requests for any of
// tools came within withdrawalEcho, and forgets it: it answers one late
// request. Under ts.mu.
func (ts *takers) echoed(holder string, tools []string) bool {
	echoed := false
	for _, tool := range tools {
		if at, ok := ts.gone[holder][tool]; ok {
			delete(ts.gone[holder], tool)
			echoed = echoed || time.Since(at) < withdrawalEcho
		}
	}
	if len(ts.gone[holder]) == 0 {
		delete(ts.gone, holder)
	}
	return echoed
}

// withdraw ends holder's requests for work of any of tools, and any that
// begins within withdrawalEcho.
func (ts *takers) withdraw(holder string, tools []string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := time.Now()
	for h, byTool := range ts.gone {
		for tool, at := range byTool {
			if now.Sub(at) >= withdrawalEcho {
				delete(byTool, tool)
			}
		}
		if len(byTool) == 0 {
			delete(ts.gone, h)
		}
	}
	if ts.gone == nil {
		ts.gone = map[string]map[string]time.Time{}
	}
	if ts.gone[holder] == nil {
		ts.gone[holder] = map[string]time.Time{}
	}
	for _, tool := range tools {
		ts.gone[holder][tool] = now
	}
	for t := range ts.m[holder] {
		if slices.ContainsFunc(t.tools, func(tool string) bool { return slices.Contains(tools, tool) }) {
			close(t.withdrawn)
			ts.remove(t)
		}
	}
}

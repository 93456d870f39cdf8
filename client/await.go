package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Kind says what an Outcome lets the agent do.
type Kind string

// The kinds of Outcome. The zero Outcome, returned with every error but an
// *ExecutionError, has the empty Kind, which is none of these.
const (
	// Approved: a human approved the call; run it now with the Outcome's
	// Arguments (Started first).
	Approved Kind = "approved"
	// Scheduled: nobody had to approve the call (a policy rule, a session
	// grant, a read-only tool, a policy that does not ask) and its
	// scheduled time has come; run it now with the Outcome's Arguments
	// (Started first).
	Scheduled Kind = "scheduled"
	// Executed: the call has run and succeeded; Result and Cost say how.
	Executed Kind = "executed"
	// Failed: the call ran and failed. It comes with an *ExecutionError.
	Failed Kind = "failed"
)

// Outcome is what became of a call that was not refused.
type Outcome struct {
	Kind      Kind
	PendingID string
	// Arguments are what to run: the approver's when they edited the
	// agent's (then Edited is true), else the agent's own.
	Arguments json.RawMessage
	Edited    bool
	// By is who let the call run: the approving user, or "policy".
	By string
	// Reason is why: the approver's reason (Approved), or the rule or
	// grant that let the call run without asking (Scheduled).
	Reason string
	// Scope is how far a human's approval reaches (once, session, always).
	Scope machine.Scope
	// Result and Cost of a call that ran (Executed, Failed).
	Result json.RawMessage
	Cost   float64
	// RespondedBy names the approver who answered the call with Result
	// instead of it running (Executed, of a respondable call): the result
	// is theirs, not the tool's.
	RespondedBy string
	// Entry is the entry as Await last saw it.
	Entry *machine.Entry
}

// Runnable reports whether the agent should run the tool now: the call was
// approved, or scheduled and due. False for the zero Outcome.
func (o Outcome) Runnable() bool { return o.Kind == Approved || o.Kind == Scheduled }

// AwaitOption changes what Await waits for.
type AwaitOption func(*awaitConfig)

type awaitConfig struct {
	untilFinished bool
	// submitted is when this client last submitted the call (zero when
	// it did not lately): until a little after, a read that does not
	// find it is a read from behind the write, not an answer.
	submitted time.Time
	// start, when set, is the entry the submit answered with: Await
	// starts from it rather than from a read (it reads once subscribed,
	// unless watch was subscribed before the submit).
	start *machine.Entry
	watch *entryWatch
}

// UntilFinished makes Await wait past the approval until the call has run
// (Executed, or Failed with an *ExecutionError): for calls that executors
// run rather than the agent. A call nobody runs is waited for until ctx
// ends.
func UntilFinished() AwaitOption { return func(c *awaitConfig) { c.untilFinished = true } }

// Await waits until the call pendingID reaches a state the agent acts on,
// and says what that is (see the package documentation): an Outcome of
// Kind Approved, Scheduled or Executed; a *RejectedError (with the zero
// Outcome) when the call was rejected, timed out, cancelled or denied by
// policy; or an *ExecutionError (with an Outcome of Kind Failed) when it
// ran and failed.
//
// It subscribes to the call's own subject, on which toolgate announces
// every revision, and then reads the entry as it is now: an agent that
// restarted calls Await again with the same pendingId and gets the answer
// whether it came before the restart or comes after. Whatever it may have
// missed (a reconnect, a slow subscription) it reads again, at growing
// intervals, so a lost announcement costs time, never the answer. A
// scheduled call is answered at its scheduledExecutionTime, by a timer.
//
// Await never hands back a call that is already running (EXECUTING) as one
// to run: somebody claimed it (an executor, or this agent before it
// restarted), and running it again could run it twice. It waits for that
// run to finish and returns Executed or the *ExecutionError.
//
// If toolgate or the NATS server it reaches dies meanwhile, Await reads the
// entry again once the connection is back, so an answer given while it
// was away arrives within moments of its return; each read is bounded, so
// none waits on ctx alone.
//
// It returns ctx's error when ctx ends first, an error matching
// machine.ErrNotFound when there is no such call (a call this client has
// just submitted is looked for a few seconds: a read may reach a replica
// behind the write), and ErrUnavailable when toolgate does not serve its
// request API at all.
func (c *Client) Await(ctx context.Context, pendingID string, opts ...AwaitOption) (Outcome, error) {
	var cfg awaitConfig
	cfg.submitted, cfg.start, cfg.watch = c.submitted.take(pendingID)
	for _, o := range opts {
		o(&cfg)
	}
	return await(ctx, c.nc, c.read, pendingID, cfg)
}

// ReadFunc reads an entry and the revision it is at.
type ReadFunc func(ctx context.Context, pendingID string) (*machine.Entry, uint64, error)

// AwaitWith is Await for code that reads entries its own way: toolgate's
// HTTP role, answering a Claude Code hook, reads through its application
// layer rather than asking itself over NATS. nc hears the entry's
// announcements.
func AwaitWith(ctx context.Context, nc *nats.Conn, read ReadFunc, pendingID string, opts ...AwaitOption) (Outcome, error) {
	var cfg awaitConfig
	for _, o := range opts {
		o(&cfg)
	}
	return await(ctx, nc, read, pendingID, cfg)
}

func await(ctx context.Context, nc *nats.Conn, read ReadFunc, pendingID string, cfg awaitConfig) (Outcome, error) {
	// A pendingId is two plain key tokens; anything else could be a
	// wildcard that watches other calls' keys.
	if !machine.ValidPendingID(pendingID) {
		return Outcome{}, fmt.Errorf("await %q: not a toolgate pendingId: %w", pendingID, machine.ErrNotFound)
	}
	// Listen for the connection coming back before anything else: a
	// reconnect is then never unseen. What was announced while the
	// connection was down never arrives, so it is read.
	status := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(status)

	var (
		cur *machine.Entry // nil until a read or an announcement has it
		rev uint64
		// The entry names its caller, and so the subject its revisions
		// are announced on (an agent's credential hears only its own
		// calls'): Await subscribes once it has read the entry, then
		// reads again, so that a revision written after the first read is
		// in the second or announced after the subscription.
		sub     *nats.Subscription
		updates = make(chan *nats.Msg, 64)
	)
	defer func() {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}()
	if w := cfg.watch; w != nil {
		if cfg.start != nil && nc.Stats().Reconnects == w.reconnects {
			// Subscribed before the submit and connected since: every
			// revision after the submit's answer is announced to it.
			sub, updates = w.sub, w.updates
		} else {
			_ = w.sub.Unsubscribe()
		}
	}
	// Starting from the submit's answer saves a read: the one made once
	// subscribed finds whatever happened since. (Revision 0: any
	// announcement is at least as new.)
	var err error
	if cur = cfg.start; cur == nil {
		cur, rev, err = firstRead(ctx, read, pendingID, cfg.submitted)
	}
	var apiErr *wire.APIError
	switch {
	case err == nil:
	case ctx.Err() != nil, errors.Is(err, machine.ErrNotFound), errors.Is(err, ErrUnavailable),
		errors.As(err, &apiErr) && apiErr.Status < 500:
		return Outcome{}, fmt.Errorf("await %s: %w", pendingID, err)
	default:
		// No answer in time (a server dying, an election): go on
		// listening, and read again soon.
	}

	resyncEvery := awaitResyncFirst
	resync := time.NewTimer(resyncEvery)
	defer resync.Stop()
	// reread reads the entry again, in case an announcement was missed: at
	// growing intervals while the reads find nothing new, and soon again
	// after one that failed.
	reread := func() {
		e, r, err := boundedRead(ctx, read, pendingID)
		switch {
		case err == nil:
			if r > rev {
				cur, rev = e, r
			}
			resyncEvery = min(2*resyncEvery, awaitResyncMax)
		default:
			// Toolgate out of reach for now, or (not found) a read from
			// a replica behind: the entry exists, it was seen or just
			// submitted, and toolgate never deletes one.
			resyncEvery = awaitResyncFirst
		}
		resync.Reset(resyncEvery)
	}
	var (
		timer *time.Timer
		wake  <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if cur != nil && sub == nil && !answer(cur, cfg, time.Now()).done {
			if sub, err = nc.ChanSubscribe(wire.EntrySubject(cur.CallerBotID, pendingID), updates); err != nil {
				return Outcome{}, fmt.Errorf("await %s: subscribe: %w", pendingID, err)
			}
			reread()
		}
		if cur != nil {
			a := answer(cur, cfg, time.Now())
			if a.done {
				return a.out, a.err
			}
			if timer != nil {
				timer.Stop()
				timer, wake = nil, nil
			}
			if !a.wake.IsZero() {
				timer = time.NewTimer(time.Until(a.wake))
				wake = timer.C
			}
		}
		select {
		case <-ctx.Done():
			state := "not read yet"
			if cur != nil {
				state = "still " + string(cur.Status)
			}
			return Outcome{}, fmt.Errorf("await %s (%s): %w", pendingID, state, ctx.Err())
		case <-wake:
			// The scheduled time has come: look at cur again.
		case msg := <-updates:
			var ev wire.Event
			// Announcements of one entry may arrive out of order (two
			// relays), and after the read they precede: keep the newest.
			if wire.Unmarshal(msg.Data, &ev) == nil && ev.Entry != nil && ev.Revision > rev {
				cur, rev = ev.Entry, ev.Revision
			}
		case s := <-status:
			if s == nats.CLOSED {
				return Outcome{}, fmt.Errorf("await %s: %w", pendingID, nats.ErrConnectionClosed)
			}
			// Reconnected, the subscription with it: read what was
			// missed now, not at the next resync, which may be far.
			resyncEvery = awaitResyncFirst
			reread()
		case <-resync.C:
			reread()
		}
	}
}

// firstRead reads the entry Await starts from. A call submitted at
// submitted (when not zero) is looked for again while it is not found,
// for a little while: the read may have reached a replica that has not
// caught up with the submit's write.
func firstRead(ctx context.Context, read ReadFunc, pendingID string, submitted time.Time) (*machine.Entry, uint64, error) {
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		e, rev, err := boundedRead(ctx, read, pendingID)
		if !errors.Is(err, machine.ErrNotFound) || time.Now().Add(wait).After(submitted.Add(readYourWrites)) {
			return e, rev, err
		}
		select {
		case <-ctx.Done():
			return nil, 0, err
		case <-time.After(wait):
		}
	}
}

// boundedRead reads the entry, giving up after awaitReadTimeout: no read
// of Await's waits on the agent's context alone, which may last hours.
func boundedRead(ctx context.Context, read ReadFunc, pendingID string) (*machine.Entry, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, awaitReadTimeout)
	defer cancel()
	return read(ctx, pendingID)
}

// How often Await reads the entry again in case it missed an
// announcement: soon at first, when a missed one costs most, then less
// and less often. A read is given up after awaitReadTimeout, longer than
// the default unavailable wait, so that "toolgate is not reachable" can
// still be told.
const (
	awaitResyncFirst = time.Second
	awaitResyncMax   = 30 * time.Second
	awaitReadTimeout = DefaultUnavailableWait + attemptTimeout
)

// readYourWrites is how long after a submit a read that does not find the
// call is taken for a read from behind the write.
const readYourWrites = 5 * time.Second

// recentSubmits remembers when a client submitted its calls, and what
// the submit answered, for readYourWrites and for Await to start from: a
// few seconds' worth, pruned each time it has doubled.
type recentSubmits struct {
	mu    sync.Mutex
	at    map[string]recentSubmit
	prune int // the size at which to prune next
}

type recentSubmit struct {
	at    time.Time
	entry *machine.Entry
	watch *entryWatch // nil: none, or taken
}

func (r *recentSubmits) add(e *machine.Entry, w *entryWatch) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]recentSubmit{}
	}
	if len(r.at) >= max(r.prune, 1024) {
		for id, s := range r.at {
			if now.Sub(s.at) > readYourWrites {
				delete(r.at, id)
			}
		}
		r.prune = 2 * len(r.at)
	}
	r.at[e.PendingID] = recentSubmit{at: now, entry: e, watch: w}
}

// take returns when pendingID was submitted lately, what the submit
// answered and the watch made before it, if still there (the first
// Await takes it), or the zero time and nils.
func (r *recentSubmits) take(pendingID string) (time.Time, *machine.Entry, *entryWatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.at[pendingID]
	if !ok || time.Since(s.at) > readYourWrites {
		return time.Time{}, nil, nil
	}
	w := s.watch
	s.watch = nil
	r.at[pendingID] = s
	if !w.take() {
		w = nil
	}
	return s.at, s.entry, w
}

// entryWatch is a subscription to one call's revisions made before its
// submit was sent (Client.watchBefore). Await takes it; one nobody takes
// within readYourWrites is let go.
type entryWatch struct {
	sub        *nats.Subscription
	updates    chan *nats.Msg
	reconnects uint64 // the connection's when it subscribed
	expiry     *time.Timer
}

// newEntryWatch subscribes to subject, or returns nil if it cannot.
func newEntryWatch(nc *nats.Conn, subject string) *entryWatch {
	w := &entryWatch{updates: make(chan *nats.Msg, 64), reconnects: nc.Stats().Reconnects}
	sub, err := nc.ChanSubscribe(subject, w.updates)
	if err != nil {
		return nil
	}
	w.sub = sub
	w.expiry = time.AfterFunc(readYourWrites, func() { _ = sub.Unsubscribe() })
	return w
}

// take makes the watch the caller's to unsubscribe, and reports false if
// it was let go already. A nil watch is never taken.
func (w *entryWatch) take() bool {
	return w != nil && w.expiry.Stop()
}

// release lets go of a watch nobody will take.
func (w *entryWatch) release() {
	if w.take() {
		_ = w.sub.Unsubscribe()
	}
}

// Request submits call and awaits its answer: Submit, then Await.
func (c *Client) Request(ctx context.Context, call machine.Call, opts ...AwaitOption) (Outcome, error) {
	e, err := c.Submit(ctx, call)
	if err != nil {
		return Outcome{}, err
	}
	var cfg awaitConfig
	for _, o := range opts {
		o(&cfg)
	}
	// A denial (or a retried submit of a finished call) is answered by
	// the entry Submit returned; no need to watch.
	if a := answer(e, cfg, time.Now()); a.done {
		_, _, w := c.submitted.take(e.PendingID)
		if w != nil {
			_ = w.sub.Unsubscribe()
		}
		return a.out, a.err
	}
	return c.Await(ctx, e.PendingID, opts...)
}

// step is what Await makes of an entry: an answer (done), or a time to
// look again without news (wake), or neither: wait for the next revision.
type step struct {
	done bool
	out  Outcome
	err  error
	wake time.Time
}

// answer reads an entry at now.
func answer(e *machine.Entry, cfg awaitConfig, now time.Time) step {
	if rej := refusal(e); rej != nil {
		return step{done: true, err: rej}
	}
	o := Outcome{
		PendingID: e.PendingID,
		Arguments: e.ToolArguments,
		Edited:    len(e.OriginalArguments) > 0,
		By:        cmp.Or(e.ApprovedOrRejectedByUserID, "policy"),
		Scope:     e.DecisionScope,
		Entry:     e,
	}
	switch e.Status {
	case machine.StateCompletedSuccess:
		o.Kind, o.Result, o.Cost, o.RespondedBy = Executed, e.Result, e.Cost, e.RespondedBy
		return step{done: true, out: o}
	case machine.StateCompletedFailure:
		o.Kind, o.Result, o.Cost = Failed, e.Result, e.Cost
		return step{done: true, out: o, err: &ExecutionError{Message: e.Error, Cost: e.Cost, Entry: e}}
	case machine.StateApproved:
		if cfg.untilFinished {
			return step{}
		}
		o.Kind, o.Reason = Approved, e.StatusReason
		return step{done: true, out: o}
	case machine.StateScheduled:
		if cfg.untilFinished {
			return step{}
		}
		due := time.UnixMilli(e.ScheduledExecutionTime)
		if now.Before(due) {
			return step{wake: due}
		}
		o.Kind, o.By, o.Reason = Scheduled, "policy", e.StatusReason
		return step{done: true, out: o}
	}
	// Pending approval, or running: the answer is still to come.
	return step{}
}

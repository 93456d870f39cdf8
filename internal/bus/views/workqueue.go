package views

import (
	"container/heap"
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// WorkQueue is a view of tool_calls for executors that take work from
// toolgate: the calls that may be claimed now, by tool, in the order they
// became so, and when each of the others will be (a scheduled call when
// it is due, a running one when its lease runs out with attempts left).
// It holds nothing the bucket does not: every process that serves the
// request API builds its own from the bucket, again at each restart, so a
// runnable call is offered until somebody claims it, whatever died.
//
// Take hands a call to one taker in this process at a time; claiming it
// is a compare-and-set on the call (gate), so of the processes that offer
// it, one claim wins.
type WorkQueue struct {
	mu     sync.Mutex
	st     *workState // nil until the bucket is first read, and between lives of the watch
	timer  *time.Timer
	wakeAt time.Time
	// waiters are the takers waiting for a call of a tool.
	waiters map[string]map[chan struct{}]struct{}
}

// workState is one life's view.
type workState struct {
	calls map[string]*WorkCall  // every call runnable now or later, by pendingId
	lines map[string]*list.List // the ready calls, by tool
	later laterHeap
	// held are the running calls by the holder of their lease, and
	// holders the holder of each (by pendingId).
	held    map[string]map[string]heldCall
	holders map[string]string
	// upTo is the bucket's last revision the watch brought, and ahead
	// the revisions this process wrote and filed before the watch
	// brought them (Wrote), by pendingId.
	upTo  uint64
	ahead map[string]uint64
}

// heldCall is a call running under a lease: its attempt, and since when
// this view has known the attempt's lease to be its holder's.
type heldCall struct {
	attempt int
	since   time.Time
}

// WorkCall is a call of the queue: runnable at Since (by the server's
// clock) as of Revision.
type WorkCall struct {
	PendingID string
	Tool      string
	Revision  uint64
	Since     time.Time

	at      time.Time     // when it becomes runnable, while later
	elem    *list.Element // in ready, while ready
	index   int           // in later, while later; -1 otherwise
	refused int           // claims refused at this revision
}

// NewWorkQueue returns an empty queue; it is filled as a view of the
// process's CallsFeed (View).
func NewWorkQueue() *WorkQueue {
	return &WorkQueue{waiters: map[string]map[chan struct{}]struct{}{}}
}

func newWorkState() *workState {
	return &workState{calls: map[string]*WorkCall{}, lines: map[string]*list.List{}, held: map[string]map[string]heldCall{}, holders: map[string]string{}, ahead: map[string]uint64{}}
}

// View is the queue as a view of a CallsFeed.
func (q *WorkQueue) View() CallsView {
	return CallsView{Unsync: q.unsync, Start: func() (func(CallRevision), func()) {
		loading := newWorkState()
		apply := func(r CallRevision) {
			if loading != nil {
				loading.watched(r, time.Now(), nil)
				return
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			q.st.watched(r, time.Now(), q.wakeLocked)
			q.scheduleLocked()
		}
		loaded := func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.st, loading = loading, nil
			for tool := range q.st.lines {
				q.wakeLocked(tool)
			}
			q.scheduleLocked()
		}
		return apply, loaded
	}}
}

func (q *WorkQueue) unsync() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.st = nil
}

// watched files a revision the watch of the bucket brought, unless this
// process filed it, or a later one of the call, already (Wrote).
func (st *workState) watched(r CallRevision, now time.Time, woken func(tool string)) {
	st.upTo = r.Revision
	if ahead, ok := st.ahead[r.Key]; ok {
		if r.Revision <= ahead {
			if r.Revision == ahead {
				delete(st.ahead, r.Key)
			}
			return
		}
		delete(st.ahead, r.Key)
	}
	st.apply(r, now, woken)
}

// Wrote files e, which this process wrote at revision rev, before the
// watch brings it back: an approved call is offered to the executors
// waiting here at once, rather than after the round trip through the
// stream (and, under load, the watch's queue). Revisions of the call the
// watch brings up to rev are then passed over. One the watch brought
// already is not filed again: the watch brings revisions in order, so it
// has brought those up to upTo.
func (q *WorkQueue) Wrote(e *machine.Entry, rev uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st == nil || rev <= q.st.upTo || rev <= q.st.ahead[e.PendingID] {
		return
	}
	q.st.ahead[e.PendingID] = rev
	q.st.apply(CallRevision{Key: e.PendingID, Revision: rev, Created: time.Now(), Head: headOf(e)}, time.Now(), q.wakeLocked)
	q.scheduleLocked()
}

// apply files one revision of the bucket: the call's place in the queue
// is what this revision says, whatever it was. woken, when set, is told
// of each tool a call became ready for.
func (st *workState) apply(r CallRevision, now time.Time, woken func(tool string)) {
	if old := st.calls[r.Key]; old != nil {
		st.remove(old)
	}
	h := r.Head
	st.hold(r.Key, h, now)
	if r.Removed || h == nil {
		return
	}
	c := &WorkCall{PendingID: r.Key, Tool: h.ToolName, Revision: r.Revision, Since: r.Created, index: -1}
	switch {
	case h.Status == machine.StateApproved:
	case h.Status == machine.StateScheduled:
		c.at = time.UnixMilli(h.ScheduledExecutionTime)
	case h.Status == machine.StateExecuting && h.Lease != nil &&
		(&machine.Entry{Idempotent: h.Idempotent, ExecutionAttempts: h.ExecutionAttempts, MaxExecutionAttempts: h.MaxExecutionAttempts}).Reclaimable():
		// An idempotent tool's call is reclaimed once its lease runs out;
		// any other, or the last attempt, the timer ends instead.
		c.at = time.UnixMilli(h.Lease.ExpiresAt)
	default:
		return
	}
	if !c.at.IsZero() {
		c.Since = c.at
	}
	st.add(c, now, woken)
}

// hold files the holder of the lease h (nil: a delete) has on the call
// key, if any, keeping since when it has had it through its renewals.
func (st *workState) hold(key string, h *CallHead, now time.Time) {
	holder, attempt := "", 0
	if h != nil && h.Status == machine.StateExecuting && h.Lease != nil {
		holder, attempt = h.Lease.Holder, h.ExecutionAttempts
	}
	if prev, ok := st.holders[key]; ok {
		if prev == holder && st.held[holder][key].attempt == attempt {
			return
		}
		delete(st.held[prev], key)
		if len(st.held[prev]) == 0 {
			delete(st.held, prev)
		}
		delete(st.holders, key)
	}
	if holder == "" {
		return
	}
	st.holders[key] = holder
	if st.held[holder] == nil {
		st.held[holder] = map[string]heldCall{}
	}
	st.held[holder][key] = heldCall{attempt: attempt, since: now}
}

// Held lists the calls running under holder's lease for longer than
// grace, but those in skip: the calls a taker has in hand. A claim made
// for holder whose answer never reached it is among them, once the
// answer, had it come, would have been in hand.
func (q *WorkQueue) Held(holder string, skip []string, grace time.Duration) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st == nil {
		return nil
	}
	var ids []string
	before := time.Now().Add(-grace)
	for id, c := range q.st.held[holder] {
		if c.since.Before(before) && !slices.Contains(skip, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// add files c as ready, or as later if its time has not come.
func (st *workState) add(c *WorkCall, now time.Time, woken func(tool string)) {
	st.calls[c.PendingID] = c
	if c.at.After(now) {
		heap.Push(&st.later, c)
		return
	}
	st.ready(c, false)
	if woken != nil {
		woken(c.Tool)
	}
}

// ready puts c in its tool's line, last, or first when front.
func (st *workState) ready(c *WorkCall, front bool) {
	l := st.lines[c.Tool]
	if l == nil {
		l = list.New()
		st.lines[c.Tool] = l
	}
	if front {
		c.elem = l.PushFront(c)
	} else {
		c.elem = l.PushBack(c)
	}
}

// unready takes c out of its tool's line.
func (st *workState) unready(c *WorkCall) {
	l := st.lines[c.Tool]
	l.Remove(c.elem)
	c.elem = nil
	if l.Len() == 0 {
		delete(st.lines, c.Tool)
	}
}

// remove takes c out of the queue.
func (st *workState) remove(c *WorkCall) {
	if st.calls[c.PendingID] == c {
		delete(st.calls, c.PendingID)
	}
	if c.elem != nil {
		st.unready(c)
	}
	if c.index >= 0 {
		heap.Remove(&st.later, c.index)
	}
}

// due makes ready the later calls whose time has come.
func (st *workState) due(now time.Time, woken func(tool string)) {
	for len(st.later) > 0 && !st.later[0].at.After(now) {
		c := heap.Pop(&st.later).(*WorkCall)
		st.add(c, now, woken)
	}
}

// Take hands out up to n ready calls of tools, oldest first within a
// tool, taking the tools in turn. They are the caller's until a revision
// of each replaces it (its claim's), or the caller puts it back (Refused,
// Failed). With none ready, wait, when given, is signalled once one of
// tools may have one; the caller then calls Take again, and Stop when it
// waits no more.
func (q *WorkQueue) Take(tools []string, n int, wait chan struct{}) []*WorkCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	var taken []*WorkCall
	if q.st != nil {
		q.st.due(time.Now(), nil)
		for more := true; more && len(taken) < n; {
			more = false
			for _, tool := range tools {
				l := q.st.lines[tool]
				if l == nil || len(taken) == n {
					continue
				}
				// Out of its line but still known.
				c := l.Front().Value.(*WorkCall)
				q.st.unready(c)
				taken = append(taken, c)
				more = true
			}
		}
		q.scheduleLocked()
	}
	if len(taken) == 0 && wait != nil {
		for _, tool := range tools {
			ws := q.waiters[tool]
			if ws == nil {
				ws = map[chan struct{}]struct{}{}
				q.waiters[tool] = ws
			}
			ws[wait] = struct{}{}
		}
	}
	return taken
}

// Stop forgets a taker's wait channel, on each of tools.
func (q *WorkQueue) Stop(tools []string, wait chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, tool := range tools {
		if ws := q.waiters[tool]; ws != nil {
			delete(ws, wait)
			if len(ws) == 0 {
				delete(q.waiters, tool)
			}
		}
	}
}

// Failed puts back a call whose claim could not be made (toolgate's
// store did not answer), first in its tool's line, unless a revision of
// it came meanwhile.
func (q *WorkQueue) Failed(c *WorkCall) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st == nil || q.st.calls[c.PendingID] != c {
		return
	}
	q.st.ready(c, true)
	q.wakeLocked(c.Tool)
}

// Refused puts back, to be offered again later, a call whose claim was
// refused though the queue had it as runnable, unless a revision of it
// came meanwhile: that one says where it is. The refusal's entry, cur,
// may be ahead of the queue (claimed through another process, finished)
// or behind it (a read from a stream leader just elected): the queue
// trusts only the bucket's own revisions, and in the meantime looks
// again, each time twice as late, from retry up to maxRefusedRetry; and
// not before cur's lease, if it has one, runs out.
func (q *WorkQueue) Refused(c *WorkCall, cur *machine.Entry, retry time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st == nil || q.st.calls[c.PendingID] != c {
		return
	}
	now := time.Now()
	q.st.remove(c)
	c.refused++
	c.at = now.Add(min(retry<<min(c.refused-1, 16), maxRefusedRetry))
	if cur != nil && cur.Lease != nil {
		if expires := time.UnixMilli(cur.Lease.ExpiresAt); expires.After(c.at) {
			c.at = expires
		}
	}
	q.st.add(c, now, nil)
	q.scheduleLocked()
}

// maxRefusedRetry bounds how late a refused call is looked at again.
const maxRefusedRetry = 5 * time.Second

// Ready says how many calls are ready, and how many wait for their time;
// ok is false while the queue does not follow the bucket.
func (q *WorkQueue) Ready() (ready, waiting int, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st == nil {
		return 0, 0, false
	}
	for _, l := range q.st.lines {
		ready += l.Len()
	}
	return ready, len(q.st.later), true
}

// wakeLocked signals the takers waiting for a call of tool.
func (q *WorkQueue) wakeLocked(tool string) {
	for w := range q.waiters[tool] {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// scheduleLocked sets the timer for the first later call.
func (q *WorkQueue) scheduleLocked() {
	if q.st == nil || len(q.st.later) == 0 {
		return
	}
	at := q.st.later[0].at
	if q.timer != nil && !q.wakeAt.IsZero() && !at.Before(q.wakeAt) {
		return
	}
	q.wakeAt = at
	d := time.Until(at)
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.fire)
		return
	}
	q.timer.Reset(d)
}

// fire makes the later calls whose time has come ready.
func (q *WorkQueue) fire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.wakeAt = time.Time{}
	if q.st == nil {
		return
	}
	q.st.due(time.Now(), q.wakeLocked)
	q.scheduleLocked()
}

// laterHeap orders the later calls by when they become runnable.
type laterHeap []*WorkCall

func (h laterHeap) Len() int           { return len(h) }
func (h laterHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h laterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *laterHeap) Push(x any) {
	c := x.(*WorkCall)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *laterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.index = -1
	*h = old[:len(old)-1]
	return c
}

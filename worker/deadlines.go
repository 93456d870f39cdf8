package worker

import (
	"container/heap"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// kind is what falls due at a deadline.
type kind uint8

const (
	kindNone     kind = iota
	kindApproval      // approvalTimeoutAt of a pending call: Expire it
	kindStart         // scheduledExecutionTime of a scheduled call: queue it
	kindLease         // lease.expiresAt of a running call: queue it again, or fail it
	// kindUnclaimed is a while after a call became runnable (approved, or
	// scheduled and due) with no executor claiming it: queue it again,
	// since its work item may be lost (dead-lettered, its stream purged).
	kindUnclaimed
	// kindReminder is reminderAt of a pending call nobody decided yet:
	// Remind its approvers, once, before its approval deadline.
	kindReminder
	// kindEscalation is the next escalation tier's time of a pending call
	// nobody decided yet: Escalate it, widening who may decide.
	kindEscalation
	// kindRetire is the end of a finished call's retention window: it
	// moves from tool_calls to the archive.
	kindRetire
)

func (k kind) String() string {
	switch k {
	case kindApproval:
		return "approval_timeout"
	case kindStart:
		return "scheduled_start"
	case kindLease:
		return "lease_expiry"
	case kindUnclaimed:
		return "unclaimed"
	case kindReminder:
		return "reminder"
	case kindEscalation:
		return "escalation"
	case kindRetire:
		return "retention"
	}
	return "none"
}

// delays are the timer's own durations a deadline derives from.
type delays struct {
	// unclaimed: a runnable call nobody claims is queued again after it
	// (never, when 0).
	unclaimed time.Duration
	// retain: a finished call leaves tool_calls for the archive this long
	// after it finished (never, when 0).
	retain time.Duration
}

// deadlineOf says what falls due next for e, and when (epoch ms).
func deadlineOf(e *machine.Entry, d delays) (kind, int64) {
	unclaimed := d.unclaimed
	var since int64 // when the call became runnable
	if t := e.LastTransition; t != nil {
		since = t.At
	}
	switch e.Status {
	case machine.StatePendingApproval:
		// The earliest of its reminder, its next escalation tier and its
		// deadline. An overdue call has only escalations left: the flag is
		// raised once.
		k, at := kindNone, int64(0)
		earliest := func(kk kind, t int64) {
			if k == kindNone || t < at {
				k, at = kk, t
			}
		}
		if !e.Overdue && !e.Reminded && e.ReminderAt > 0 && e.ReminderAt < e.ApprovalTimeoutAt {
			earliest(kindReminder, e.ReminderAt)
		}
		if e.Escalated < len(e.Escalations) {
			earliest(kindEscalation, e.Escalations[e.Escalated].At)
		}
		if !e.Overdue && e.ApprovalTimeoutAt > 0 {
			earliest(kindApproval, e.ApprovalTimeoutAt)
		}
		return k, at
	case machine.StateScheduled:
		// The relay queues a call that was due when it was written (the
		// same test it applies); only a later start is the timer's.
		if t := e.LastTransition; t == nil || !e.Runnable(time.UnixMilli(t.At)) {
			return kindStart, e.ScheduledExecutionTime
		}
		if unclaimed > 0 {
			return kindUnclaimed, max(since, e.ScheduledExecutionTime) + unclaimed.Milliseconds()
		}
	case machine.StateApproved:
		if unclaimed > 0 {
			return kindUnclaimed, since + unclaimed.Milliseconds()
		}
	case machine.StateExecuting:
		if e.Lease != nil {
			return kindLease, e.Lease.ExpiresAt
		}
	default:
		if d.retain > 0 && e.Status.Terminal() {
			return kindRetire, since + d.retain.Milliseconds()
		}
	}
	return kindNone, 0
}

// deadline is the next thing due for one entry. The timer keeps at most one
// per entry: an entry is in one state at a time, and each state has at most
// one deadline.
type deadline struct {
	id   string
	kind kind
	at   int64  // epoch ms
	rev  uint64 // the revision kind and at were read from
	// requeued is the revision whose expired lease the timer queued again;
	// firing again finds the entry still there only if nothing renewed or
	// reclaimed it since, and then has nothing more to do.
	requeued uint64

	index int // in the heap; -1 when not queued
	busy  bool
	// busyRev is rev when the action started: a different rev when it
	// ends means an event brought newer news meanwhile.
	busyRev uint64
}

// job is what an action needs of a deadline, copied out of the heap so the
// action's goroutine shares nothing with the scheduler.
type job struct {
	id       string
	kind     kind
	at       int64
	rev      uint64
	requeued uint64
}

// outcome is what an action learned: the revision it read (0 if it read
// none) and what is due next for the entry.
type outcome struct {
	id       string
	rev      uint64
	kind     kind
	at       int64
	requeued uint64
	gone     bool // the entry no longer exists
}

// deadlines is the timer's schedule: a min-heap on the deadline, and an
// index by pendingId. Only the scheduler goroutine touches it.
type deadlines struct {
	byID   map[string]*deadline
	heap   deadlineHeap
	delays delays // see deadlineOf
}

func newDeadlines(d delays) *deadlines {
	return &deadlines{byID: map[string]*deadline{}, delays: d}
}

// observe records what revision rev of entry e is due for. A revision no
// newer than the one already known changes nothing: events can arrive after
// the start-up read has seen later revisions, and a relay replaying after a
// crash can repeat them.
func (s *deadlines) observe(e *machine.Entry, rev uint64) {
	k, at := deadlineOf(e, s.delays)
	d := s.byID[e.PendingID]
	if d == nil {
		if k == kindNone {
			return
		}
		d = &deadline{id: e.PendingID, index: -1}
		s.byID[d.id] = d
	} else if rev <= d.rev {
		return
	}
	d.rev, d.kind, d.at, d.requeued = rev, k, at, 0
	s.requeue(d)
}

// requeue puts d in the heap at d.at, or forgets it when nothing is due;
// a deadline whose action is running waits for its outcome.
func (s *deadlines) requeue(d *deadline) {
	switch {
	case d.busy:
	case d.kind == kindNone:
		if d.index >= 0 {
			heap.Remove(&s.heap, d.index)
		}
		delete(s.byID, d.id)
	case d.index >= 0:
		heap.Fix(&s.heap, d.index)
	default:
		heap.Push(&s.heap, d)
	}
}

// next returns the earliest deadline queued.
func (s *deadlines) next() (int64, bool) {
	if len(s.heap) == 0 {
		return 0, false
	}
	return s.heap[0].at, true
}

// popDue takes the earliest deadline if it is due at now (epoch ms) and
// marks it busy until done is called with its outcome.
func (s *deadlines) popDue(now int64) (job, bool) {
	if len(s.heap) == 0 || s.heap[0].at > now {
		return job{}, false
	}
	d := heap.Pop(&s.heap).(*deadline)
	d.busy, d.busyRev = true, d.rev
	return job{id: d.id, kind: d.kind, at: d.at, rev: d.rev, requeued: d.requeued}, true
}

// done records an action's outcome. What the action read stands unless an
// event newer than it came in while it ran.
func (s *deadlines) done(o outcome) {
	d := s.byID[o.id]
	if d == nil {
		return
	}
	d.busy = false
	switch {
	case o.gone:
		d.kind = kindNone
	case o.rev > 0 && o.rev >= d.rev, o.rev == 0 && d.rev == d.busyRev:
		d.rev = max(d.rev, o.rev)
		d.kind, d.at, d.requeued = o.kind, o.at, o.requeued
	}
	s.requeue(d)
}

// len is the number of entries with something due.
func (s *deadlines) len() int { return len(s.byID) }

// deadlineHeap orders deadlines by time; container/heap does the rest.
type deadlineHeap []*deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *deadlineHeap) Push(x any) {
	d := x.(*deadline)
	d.index = len(*h)
	*h = append(*h, d)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.index = -1
	return d
}

package worker

import (
	"container/heap"
	"encoding/binary"
	"hash/maphash"

	"github.com/toolgate/toolgate/machine"
)

// kind is what falls due at a deadline.
type kind uint8

const (
	kindNone     kind = iota
	kindApproval      // approvalTimeoutAt of a pending call: Expire it
	// kindLease is lease.expiresAt of a running call no other executor
	// may take over (machine.Entry.Reclaimable): end it with its outcome
	// unknown. (A call of an idempotent tool with attempts left is
	// offered to executors again instead, as a scheduled call once due:
	// views.WorkQueue.)
	kindLease
	// kindReminder is reminderAt of a pending call nobody decided yet:
	// Remind its approvers, once, before its approval deadline.
	kindReminder
	// kindEscalation is the next escalation tier's time of a pending call
	// nobody decided yet: Escalate it, widening who may decide.
	kindEscalation
)

// A finished call has no deadline: the end of its retention window is
// in the timer's retirements (retirements.go), not in its schedule.

func (k kind) String() string {
	switch k {
	case kindApproval:
		return "approval_timeout"
	case kindLease:
		return "lease_expiry"
	case kindReminder:
		return "reminder"
	case kindEscalation:
		return "escalation"
	}
	return "none"
}

// deadlineOf says what falls due next for e, and when (epoch ms).
func deadlineOf(e *machine.Entry) (kind, int64) {
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
	case machine.StateExecuting:
		if e.Lease != nil && !e.Reclaimable() {
			return kindLease, e.Lease.ExpiresAt
		}
	}
	return kindNone, 0
}

// deadline is the next thing due for one entry. The timer keeps at most one
// per entry: an entry is in one state at a time, and each state has at most
// one deadline. It holds no pointer: its pendingId is in the schedule's
// byte arena.
type deadline struct {
	at    int64  // epoch ms
	rev   uint64 // the revision kind and at were read from
	id    int    // where its pendingId starts in the arena; -1 when the slot is free
	index int32  // in the heap; -1 when not queued
	kind  kind
}

// job is what an action needs of a deadline, copied out of the heap so the
// action's goroutine shares nothing with the scheduler.
type job struct {
	id   string
	kind kind
	at   int64
	rev  uint64
}

// outcome is what an action learned: the revision it read (0 if it read
// none) and what is due next for the entry.
type outcome struct {
	id   string
	rev  uint64
	kind kind
	at   int64
	gone bool // the entry no longer exists
	// retirement: the outcome of a finished call's retirement, started
	// in the feed's life life; at, when not 0, is when to try it again.
	retirement bool
	life       uint64
}

// deadlines is the timer's schedule: a min-heap on the deadline, and an
// index by pendingId. Only the scheduler goroutine touches it.
//
// It holds nothing the garbage collector has to look into, however many
// calls are open: the deadlines are a slice of structs without pointers,
// found by a hash of their pendingId (checked against the id itself, kept
// in one byte arena), and the heap is one of int32 indexes into that
// slice. The collector marks the few slices and the map whole; as a map of
// strings to pointers, a heap of pointers and a string a call, the
// schedule had it follow four pointers a call, on every cycle, beside
// everything else the process does (the tail of the timer's lateness at
// load: docs/performance.md).
type deadlines struct {
	slots []deadline
	free  []int32 // slots no entry holds
	// byHash finds an entry's slot by the hash of its pendingId; the rare
	// id whose hash another id's slot holds already is in clash.
	byHash map[uint64]int32
	clash  map[string]int32
	hash   func(string) uint64
	// ids holds each slot's pendingId, its length first (a uvarint);
	// dead counts the bytes of those no slot holds any more, which a
	// compaction gives back once they are the greater part.
	ids  []byte
	dead int
	heap []int32 // slots queued, by time: a min-heap (container/heap's, as byTime)
	// busy are the slots whose action is running, and rev when it
	// started: a different rev when it ends means an event brought newer
	// news meanwhile.
	busy map[int32]uint64
}

func newDeadlines() *deadlines {
	seed := maphash.MakeSeed()
	return &deadlines{byHash: map[uint64]int32{}, busy: map[int32]uint64{},
		hash: func(id string) uint64 { return maphash.String(seed, id) }}
}

// set records that revision rev of pendingId id's entry has k due at at
// (kindNone: nothing). A revision no newer than the one already known
// changes nothing: the feed reading the bucket again after a failure
// repeats what the timer knows.
func (s *deadlines) set(id string, rev uint64, k kind, at int64) {
	i, ok := s.find(id)
	if !ok {
		if k == kindNone {
			return
		}
		i = s.add(id)
	} else if rev <= s.slots[i].rev {
		return
	}
	d := &s.slots[i]
	d.rev, d.kind, d.at = rev, k, at
	s.requeue(i, id)
}

// requeue puts slot i, pendingId id's, in the heap at its time, or forgets
// it when nothing is due; a deadline whose action is running waits for its
// outcome.
func (s *deadlines) requeue(i int32, id string) {
	d := &s.slots[i]
	_, busy := s.busy[i]
	switch {
	case busy:
	case d.kind == kindNone:
		if d.index >= 0 {
			heap.Remove(s.byTime(), int(d.index))
		}
		s.release(i, id)
	case d.index >= 0:
		heap.Fix(s.byTime(), int(d.index))
	default:
		heap.Push(s.byTime(), i)
	}
}

// next returns the earliest deadline queued.
func (s *deadlines) next() (int64, bool) {
	if len(s.heap) == 0 {
		return 0, false
	}
	return s.slots[s.heap[0]].at, true
}

// popDue takes the earliest deadline if it is due at now (epoch ms) and
// marks it busy until done is called with its outcome.
func (s *deadlines) popDue(now int64) (job, bool) {
	if len(s.heap) == 0 || s.slots[s.heap[0]].at > now {
		return job{}, false
	}
	i := heap.Pop(s.byTime()).(int32)
	d := &s.slots[i]
	s.busy[i] = d.rev
	return job{id: string(s.idAt(d.id)), kind: d.kind, at: d.at, rev: d.rev}, true
}

// done records an action's outcome. What the action read stands unless an
// event newer than it came in while it ran.
func (s *deadlines) done(o outcome) {
	i, ok := s.find(o.id)
	if !ok {
		return
	}
	busyRev := s.busy[i]
	delete(s.busy, i)
	d := &s.slots[i]
	switch {
	case o.gone:
		d.kind = kindNone
	case o.rev > 0 && o.rev >= d.rev, o.rev == 0 && d.rev == busyRev:
		d.rev = max(d.rev, o.rev)
		d.kind, d.at = o.kind, o.at
	}
	s.requeue(i, o.id)
}

// len is the number of entries with something due.
func (s *deadlines) len() int { return len(s.slots) - len(s.free) }

// find returns the slot of pendingId id.
func (s *deadlines) find(id string) (int32, bool) {
	if i, ok := s.byHash[s.hash(id)]; ok && string(s.idAt(s.slots[i].id)) == id {
		return i, true
	}
	i, ok := s.clash[id]
	return i, ok
}

// add gives pendingId id, which no slot holds, a slot: not queued,
// nothing due yet.
func (s *deadlines) add(id string) int32 {
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		i = int32(len(s.slots))
		s.slots = append(s.slots, deadline{})
	}
	s.slots[i] = deadline{id: len(s.ids), index: -1}
	s.ids = binary.AppendUvarint(s.ids, uint64(len(id)))
	s.ids = append(s.ids, id...)
	h := s.hash(id)
	if _, taken := s.byHash[h]; taken {
		if s.clash == nil {
			s.clash = map[string]int32{}
		}
		s.clash[id] = i
	} else {
		s.byHash[h] = i
	}
	return i
}

// release frees slot i, pendingId id's, neither queued nor busy.
func (s *deadlines) release(i int32, id string) {
	d := &s.slots[i]
	h := s.hash(id)
	if j, ok := s.byHash[h]; ok && j == i {
		delete(s.byHash, h)
	} else {
		delete(s.clash, id)
	}
	s.dead += d.idEnd(s.ids) - d.id
	*d = deadline{id: -1, index: -1}
	s.free = append(s.free, i)
	if s.dead > 64<<10 && s.dead > len(s.ids)/2 {
		s.compact()
	}
}

// compact copies the ids slots hold to an arena of their own size,
// leaving those of the entries forgotten: once for as many bytes
// forgotten as held, so a copy of each byte at most once, amortised.
func (s *deadlines) compact() {
	ids := make([]byte, 0, len(s.ids)-s.dead)
	for i := range s.slots {
		d := &s.slots[i]
		if d.id < 0 {
			continue
		}
		at := len(ids)
		ids = append(ids, s.ids[d.id:d.idEnd(s.ids)]...)
		d.id = at
	}
	s.ids, s.dead = ids, 0
}

// idAt is the pendingId that starts at off in the arena.
func (s *deadlines) idAt(off int) []byte {
	n, w := binary.Uvarint(s.ids[off:])
	return s.ids[off+w : off+w+int(n)]
}

// idEnd is where d's pendingId ends in the arena ids.
func (d *deadline) idEnd(ids []byte) int {
	n, w := binary.Uvarint(ids[d.id:])
	return d.id + w + int(n)
}

// byTime is the schedule as container/heap sees it: its heap of slots,
// ordered by their time, each slot knowing its place.
type byTime deadlines

func (s *deadlines) byTime() *byTime { return (*byTime)(s) }

func (h *byTime) Len() int           { return len(h.heap) }
func (h *byTime) Less(i, j int) bool { return h.slots[h.heap[i]].at < h.slots[h.heap[j]].at }
func (h *byTime) Swap(i, j int) {
	q := h.heap
	q[i], q[j] = q[j], q[i]
	h.slots[q[i]].index, h.slots[q[j]].index = int32(i), int32(j)
}

func (h *byTime) Push(x any) {
	i := x.(int32)
	h.slots[i].index = int32(len(h.heap))
	h.heap = append(h.heap, i)
}

func (h *byTime) Pop() any {
	i := h.heap[len(h.heap)-1]
	h.heap = h.heap[:len(h.heap)-1]
	h.slots[i].index = -1
	return i
}

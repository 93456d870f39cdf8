package worker

import (
	"time"
)

// retirements are the finished calls waiting out their retention window,
// kept apart from the deadlines of the open calls: a queue, in the order
// the feed delivered the revisions that finished them, which is the order
// they finished in (the bucket's stream orders the writes; at start, the
// feed reads each key's last revision in the stream's order too).
//
// A finished call costs the timer one retirement in the queue, its id (a
// string the feed's other views hold too: the call index keeps every
// key's, the feed's one copy) and when its window ends: 24 bytes, against
// about 110 for a deadline in the schedule, and nothing in the heap, whose
// every operation is then as cheap with 100k calls finished as with none.
//
// The queue is in finish order only up to the skew between the clocks of
// the writers that finished the calls (each revision's lastTransition.at
// is its writer's clock): a call whose window ends later than the next
// one's holds it back, by at most that skew, which is seconds if NTP runs
// anywhere, against a window of hours. A key written again after its
// call finished (no transition leaves a finished state, but a key
// retired by another timer may hold a new call) is queued again if it
// finishes again: a retirement that finds its key moved on (a conflict,
// or not found) is dropped, the key's later revision having queued its
// own.
//
// Only the scheduler goroutine touches it.
type retirements struct {
	retain int64 // the window, in ms; 0: nothing is retired, nor queued
	// queue holds every finished call the feed delivered, due at the end
	// of its window; retry those whose retirement failed, due again after
	// the retry delay, in the order they failed.
	queue, retry fifo
	// life counts the feed's lives: an outcome of a retirement started in
	// an earlier one is dropped (the new life queued the call again, if
	// it is still in the bucket).
	life uint64
}

// retirement is one finished call's: its pendingId, and when it is due
// (epoch ms).
type retirement struct {
	id string
	at int64
}

func newRetirements(retain time.Duration) *retirements {
	return &retirements{retain: retain.Milliseconds()}
}

// queueAt queues the retirement of pendingId id, a call that finished at
// since (epoch ms).
func (r *retirements) queueAt(id string, since int64) {
	if r.retain > 0 {
		r.queue.push(retirement{id: id, at: since + r.retain})
	}
}

// restart forgets every retirement queued: the feed reads the bucket
// again, and queues those of the calls still in it.
func (r *retirements) restart() {
	r.queue, r.retry = fifo{}, fifo{}
	r.life++
}

// next returns when the earliest retirement queued is due.
func (r *retirements) next() (int64, bool) {
	q, qok := r.queue.peek()
	y, yok := r.retry.peek()
	switch {
	case qok && yok:
		return min(q.at, y.at), true
	case qok:
		return q.at, true
	case yok:
		return y.at, true
	}
	return 0, false
}

// popDue takes the earliest retirement due at now (epoch ms), if any.
func (r *retirements) popDue(now int64) (retirement, bool) {
	q, qok := r.queue.peek()
	y, yok := r.retry.peek()
	switch {
	case yok && y.at <= now && (!qok || y.at <= q.at):
		return r.retry.pop(), true
	case qok && q.at <= now:
		return r.queue.pop(), true
	}
	return retirement{}, false
}

// done records a retirement's outcome: one to try again goes to the back
// of the retries, unless the feed has started a new life since.
func (r *retirements) done(o outcome) {
	if o.at > 0 && o.life == r.life {
		r.retry.push(retirement{id: o.id, at: o.at})
	}
}

// len is the number of retirements queued.
func (r *retirements) len() int { return r.queue.n + r.retry.n }

// fifoBlock is how many retirements a block of a fifo holds (12 KiB).
const fifoBlock = 512

// fifo is a queue of retirements in blocks of fifoBlock: its memory
// follows its length, a drained block going at once, and a push never
// copies the queue.
type fifo struct {
	// blocks: the first is read from head on, the last written up to its
	// length; every block but the last is full.
	blocks [][]retirement
	head   int
	n      int
}

func (q *fifo) push(r retirement) {
	if len(q.blocks) == 0 || len(q.blocks[len(q.blocks)-1]) == fifoBlock {
		q.blocks = append(q.blocks, make([]retirement, 0, fifoBlock))
	}
	last := &q.blocks[len(q.blocks)-1]
	*last = append(*last, r)
	q.n++
}

func (q *fifo) peek() (retirement, bool) {
	if q.n == 0 {
		return retirement{}, false
	}
	return q.blocks[0][q.head], true
}

// pop takes the first retirement of a fifo not empty.
func (q *fifo) pop() retirement {
	b := q.blocks[0]
	r := b[q.head]
	b[q.head] = retirement{} // the id is no longer the queue's to hold
	q.head++
	q.n--
	if q.head == len(b) {
		q.head = 0
		if len(b) < fifoBlock {
			q.blocks[0] = b[:0] // the last block, drained: written again
		} else {
			q.blocks[0] = nil
			q.blocks = q.blocks[1:]
		}
	}
	return r
}

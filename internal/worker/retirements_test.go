package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

func finished(id string, at int64) *machine.Entry {
	return &machine.Entry{PendingID: id, Status: machine.StateCompletedSuccess, LastTransition: &machine.Transition{Event: machine.EventSucceed, At: at}}
}

// popAll pops every retirement due at now.
func popAll(r *retirements, now int64) []retirement {
	var got []retirement
	for {
		x, ok := r.popDue(now)
		if !ok {
			return got
		}
		got = append(got, x)
	}
}

// A finished call is queued for the end of its window, in the order the
// calls finished; an open one is not; nothing is without a window.
func TestRetirements_QueuedInFinishOrder(t *testing.T) {
	r := newRetirements(time.Second)
	r.observe(finished("a.1", 100))
	r.observe(pending("a.2", 500))
	r.observe(&machine.Entry{PendingID: "a.3", Status: machine.StateRejectedByPolicy, LastTransition: &machine.Transition{At: 200}})
	r.observe(finished("a.4", 300))
	assert.Equal(t, 3, r.len())
	next, ok := r.next()
	require.True(t, ok)
	assert.EqualValues(t, 1100, next)

	assert.Empty(t, popAll(r, 1099), "none due before the first window ends")
	assert.Equal(t, []retirement{{"a.1", 1100}, {"a.3", 1200}}, popAll(r, 1250))
	assert.Equal(t, []retirement{{"a.4", 1300}}, popAll(r, 5000))
	_, ok = r.next()
	assert.False(t, ok)

	none := newRetirements(0)
	none.observe(finished("a.1", 100))
	assert.Zero(t, none.len(), "no retention: nothing is queued")
}

// A call that finished later than the next one (a writer's clock ahead)
// holds it back until its own window ends: the skew the queue accepts.
func TestRetirements_ALaterWindowHoldsTheNextBack(t *testing.T) {
	r := newRetirements(time.Second)
	r.observe(finished("a.1", 150))
	r.observe(finished("a.2", 100))
	assert.Empty(t, popAll(r, 1100))
	assert.Equal(t, []retirement{{"a.1", 1150}, {"a.2", 1100}}, popAll(r, 1150))
}

// A retirement that failed is tried again once its retry is due, among
// the others by time; one started before the feed read the bucket again
// is not (the new read queued it again).
func TestRetirements_RetriedAfterAFailure(t *testing.T) {
	r := newRetirements(time.Second)
	for i := range 4 {
		r.observe(finished(fmt.Sprintf("a.%d", i), int64(100*i)))
	}
	first, ok := r.popDue(1000)
	require.True(t, ok)
	require.Equal(t, "a.0", first.id)
	r.done(outcome{id: first.id, retirement: true, life: r.life, at: 1150}) // failed: again at 1150
	assert.Equal(t, 4, r.len())
	assert.Equal(t, []retirement{{"a.1", 1100}, {"a.0", 1150}, {"a.2", 1200}}, popAll(r, 1200))

	r.done(outcome{id: "a.1", retirement: true, life: r.life})           // retired, or gone: done with
	r.done(outcome{id: "a.2", retirement: true, life: r.life, at: 1250}) // failed
	r.restart()
	assert.Zero(t, r.len(), "the feed reads the bucket again: it queues them again")
	r.done(outcome{id: "a.0", retirement: true, life: r.life - 1, at: 1300}) // failed, in the last life
	assert.Zero(t, r.len())
	r.observe(finished("a.3", 300))
	assert.Equal(t, []retirement{{"a.3", 1300}}, popAll(r, 5000))
}

// A fifo keeps its order across blocks, and gives a drained block back.
func TestFifo(t *testing.T) {
	var q fifo
	next := 0
	for round := range 5 {
		for range 3*fifoBlock/2 + round {
			q.push(retirement{id: "x", at: int64(q.n + next)})
		}
		for range fifoBlock + round {
			r := q.pop()
			require.EqualValues(t, next, r.at)
			next++
		}
		assert.LessOrEqual(t, len(q.blocks), q.n/fifoBlock+2, "round %d: %d blocks for %d", round, len(q.blocks), q.n)
	}
	for q.n > 0 {
		require.EqualValues(t, next, q.pop().at)
		next++
	}
	_, ok := q.peek()
	assert.False(t, ok)
	assert.LessOrEqual(t, len(q.blocks), 1)
}

// The timer's schedule holds the open calls' deadlines only: a call
// that finishes leaves it for the retirements.
func TestSchedule_HoldsNoFinishedCall(t *testing.T) {
	dl, rt := newDeadlines(), newRetirements(time.Hour)
	for i := range 100 {
		id := fmt.Sprintf("a.%d", i)
		observe(dl, rt, observationOf(pending(id, 1000), uint64(2*i)))
		observe(dl, rt, observationOf(finished(id, 500), uint64(2*i+1)))
	}
	observe(dl, rt, observationOf(pending("b.1", 1000), 1000))
	assert.Equal(t, 1, dl.len(), "the one open call")
	assert.Equal(t, 100, rt.len())
	observe(dl, rt, observation{restart: true})
	assert.Zero(t, rt.len())
}

// observe queues e's retirement, if it is finished, as the timer's
// schedule does.
func (r *retirements) observe(e *machine.Entry) {
	if o := observationOf(e, 0); o.finished {
		r.queueAt(o.id, o.since)
	}
}

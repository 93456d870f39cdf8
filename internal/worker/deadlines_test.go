package worker

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
)

func pending(id string, timeoutAt int64) *machine.Entry {
	return &machine.Entry{PendingID: id, Status: machine.StatePendingApproval, ApprovalTimeoutAt: timeoutAt}
}

// executing is a call running its last attempt, whose lease is the
// timer's.
func executing(id string, expiresAt int64) *machine.Entry {
	return &machine.Entry{PendingID: id, Status: machine.StateExecuting, Lease: &machine.Lease{Holder: "x", ExpiresAt: expiresAt},
		ExecutionAttempts: machine.DefaultMaxExecutionAttempts}
}

// observe records what revision rev of e makes due, as the timer's
// schedule does.
func (s *deadlines) observe(e *machine.Entry, rev uint64) {
	o := observationOf(e, rev)
	s.set(o.id, o.rev, o.kind, o.at)
}

func TestDeadlineOf(t *testing.T) {
	written := func(e *machine.Entry, at int64) *machine.Entry {
		e.LastTransition = &machine.Transition{Event: machine.EventSchedule, To: e.Status, At: at}
		return e
	}
	for _, tc := range []struct {
		name  string
		entry *machine.Entry
		kind  kind
		at    int64
	}{
		{"pending", pending("a.b", 100), kindApproval, 100},
		{"pending, overdue", &machine.Entry{Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100, Overdue: true}, kindNone, 0},
		{"pending, an escalation first", &machine.Entry{Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100, ReminderAt: 80,
			Escalations: []machine.Escalation{{At: 50}, {At: 90}}}, kindEscalation, 50},
		{"pending, its reminder before the next tier", &machine.Entry{Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100, ReminderAt: 80,
			Escalations: []machine.Escalation{{At: 50}, {At: 90}}, Escalated: 1}, kindReminder, 80},
		{"pending, every tier reached", &machine.Entry{Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100,
			Escalations: []machine.Escalation{{At: 50}}, Escalated: 1}, kindApproval, 100},
		{"pending, overdue: tiers still reached", &machine.Entry{Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100, Overdue: true,
			Escalations: []machine.Escalation{{At: 500}}}, kindEscalation, 500},
		// Started by whoever takes it when due, reclaimed when its lease
		// runs out: views.WorkQueue.
		{"scheduled", written(&machine.Entry{Status: machine.StateScheduled, ScheduledExecutionTime: 200}, 100), kindNone, 0},
		{"executing an idempotent tool, attempts left", &machine.Entry{Status: machine.StateExecuting, Lease: &machine.Lease{ExpiresAt: 300}, ExecutionAttempts: 1, Idempotent: true}, kindNone, 0},
		{"executing a tool not idempotent, attempts left", &machine.Entry{Status: machine.StateExecuting, Lease: &machine.Lease{ExpiresAt: 300}, ExecutionAttempts: 1}, kindLease, 300},
		{"executing its last attempt", executing("a.b", 300), kindLease, 300},
		{"executing without a lease", &machine.Entry{Status: machine.StateExecuting}, kindNone, 0},
		{"approved", &machine.Entry{Status: machine.StateApproved}, kindNone, 0},
		{"rejected by timeout", &machine.Entry{Status: machine.StateRejectedByTimeout, ApprovalTimeoutAt: 100}, kindNone, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, at := deadlineOf(tc.entry)
			assert.Equal(t, tc.kind, k)
			assert.Equal(t, tc.at, at)
		})
	}
	// A finished call has no deadline: the end of its retention window
	// is a retirement (TestRetirements_*).
	for _, s := range []machine.State{machine.StateRejectedByPolicy, machine.StateCompletedSuccess, machine.StateCancelled} {
		k, _ := deadlineOf(written(&machine.Entry{Status: s}, 100))
		assert.Equal(t, kindNone, k, s)
	}
}

func TestDeadlines_EarliestFirst(t *testing.T) {
	s := newDeadlines()
	for i, at := range []int64{50, 10, 40, 30, 20} {
		s.observe(pending(string(rune('a'+i))+".x", at), 1)
	}
	_, ok := s.popDue(9)
	assert.False(t, ok, "nothing due before 10")
	var got []int64
	for {
		j, ok := s.popDue(45)
		if !ok {
			break
		}
		got = append(got, j.at)
	}
	assert.Equal(t, []int64{10, 20, 30, 40}, got)
	next, ok := s.next()
	assert.True(t, ok)
	assert.Equal(t, int64(50), next)
}

func TestDeadlines_StaleRevisionChangesNothing(t *testing.T) {
	s := newDeadlines()
	s.observe(executing("a.b", 500), 7) // from the bucket
	s.observe(executing("a.b", 100), 5) // an older event, arriving late
	j, ok := s.popDue(1000)
	require.True(t, ok)
	assert.Equal(t, int64(500), j.at)
	assert.Equal(t, uint64(7), j.rev)
}

func TestDeadlines_FinishedEntryIsForgotten(t *testing.T) {
	s := newDeadlines()
	s.observe(pending("a.b", 100), 1)
	s.observe(&machine.Entry{PendingID: "a.b", Status: machine.StateApproved}, 2)
	assert.Zero(t, s.len())
	_, ok := s.next()
	assert.False(t, ok)
}

func TestDeadlines_OutcomeOfAnAction(t *testing.T) {
	t.Run("what the action read stands", func(t *testing.T) {
		s := newDeadlines()
		s.observe(executing("a.b", 100), 3)
		j, _ := s.popDue(100)
		// A heartbeat renewed the lease: revision 4, due at 400.
		s.done(outcome{id: j.id, rev: 4, kind: kindLease, at: 400})
		next, ok := s.next()
		require.True(t, ok)
		assert.Equal(t, int64(400), next)
	})
	t.Run("an event newer than the read wins", func(t *testing.T) {
		s := newDeadlines()
		s.observe(executing("a.b", 100), 3)
		j, _ := s.popDue(100)
		s.observe(executing("a.b", 900), 6) // reclaimed while the action ran
		_, ok := s.popDue(1000)
		assert.False(t, ok, "not acted on twice at once")
		s.done(outcome{id: j.id, rev: 4, kind: kindLease, at: 400})
		next, ok := s.next()
		require.True(t, ok)
		assert.Equal(t, int64(900), next)
	})
	t.Run("an action that read nothing stands unless an event came", func(t *testing.T) {
		s := newDeadlines()
		s.observe(pending("a.b", 100), 1)
		j, _ := s.popDue(100)
		s.done(outcome{id: j.id}) // expired
		assert.Zero(t, s.len())

		s.observe(pending("c.d", 100), 1)
		j, _ = s.popDue(100)
		s.observe(executing("c.d", 700), 3) // approved and claimed meanwhile
		s.done(outcome{id: j.id})
		next, ok := s.next()
		require.True(t, ok)
		assert.Equal(t, int64(700), next)
	})
	t.Run("a failed action is retried", func(t *testing.T) {
		s := newDeadlines()
		s.observe(pending("a.b", 100), 1)
		j, _ := s.popDue(100)
		s.done(outcome{id: j.id, rev: j.rev, kind: j.kind, at: 1100})
		j, ok := s.popDue(1100)
		require.True(t, ok)
		assert.Equal(t, kindApproval, j.kind)
	})
	t.Run("a gone entry is forgotten", func(t *testing.T) {
		s := newDeadlines()
		s.observe(pending("a.b", 100), 1)
		j, _ := s.popDue(100)
		s.done(outcome{id: j.id, gone: true})
		assert.Zero(t, s.len())
	})
}

// The schedule against a plain map of what is due, through many
// observations, firings and forgettings: with ids whose hashes collide
// (three hashes for them all) and with the real hash, and with enough
// ids forgotten that the arena is compacted many times.
func TestDeadlines_AsAMap(t *testing.T) {
	t.Parallel()
	for _, collide := range []bool{true, false} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			t.Parallel()
			s := newDeadlines()
			if collide {
				s.hash = func(id string) uint64 { return uint64(len(id) % 3) }
			}
			rng := rand.New(rand.NewPCG(1, 2))
			const now = 1000 // what popDue is asked: every new deadline is due by then
			due := map[string]int64{}
			// dueAt counts the ids due at each time up to now: the earliest
			// deadline is then found in a count of times, not a scan of due.
			var dueAt [now + 1]int
			forget := func(id string) {
				if old, ok := due[id]; ok && old <= now {
					dueAt[old]--
				}
				delete(due, id)
			}
			setDue := func(id string, at int64) {
				forget(id)
				due[id] = at
				if at <= now {
					dueAt[at]++
				}
			}
			rev := uint64(0)
			for range 50_000 {
				id := fmt.Sprintf("conv-%d.call-%d", rng.IntN(50), rng.IntN(1<<rng.IntN(12)))
				rev++
				switch r := rng.IntN(10); {
				case r < 6:
					at := 1 + rng.Int64N(now)
					s.observe(pending(id, at), rev)
					setDue(id, at)
				case r < 8:
					s.observe(&machine.Entry{PendingID: id, Status: machine.StateApproved}, rev)
					forget(id)
				default: // the earliest fires: expired, or retried later
					j, ok := s.popDue(now)
					if ok != (len(due) > 0) {
						t.Fatalf("popDue: %v with %d due", ok, len(due))
					}
					if !ok {
						continue
					}
					earliest := j.at
					for at := range min(j.at, now+1) {
						if dueAt[at] > 0 {
							earliest = at
							break
						}
					}
					if j.at != due[j.id] || j.at != earliest || j.at > now {
						t.Fatalf("fired %s at %d (now %d): it is due at %d, the earliest at %d", j.id, j.at, now, due[j.id], earliest)
					}
					if r == 8 {
						s.done(outcome{id: j.id})
						forget(j.id)
					} else {
						setDue(j.id, j.at+1+rng.Int64N(100))
						s.done(outcome{id: j.id, rev: j.rev, kind: j.kind, at: due[j.id]})
					}
				}
				if s.len() != len(due) {
					t.Fatalf("%d deadlines, %d due", s.len(), len(due))
				}
			}
			got := map[string]int64{}
			last := int64(-1)
			for {
				j, ok := s.popDue(1 << 40)
				if !ok {
					break
				}
				require.GreaterOrEqual(t, j.at, last)
				last = j.at
				got[j.id] = j.at
			}
			assert.Equal(t, due, got)
		})
	}
}

// The timer reads of an entry only its head (views.CallHead, what the
// process's feed decodes): for every kind of entry, what the head makes
// due (a deadline, a retirement) is what the whole entry does.
func TestCallHead_HoldsWhatDeadlineOfReads(t *testing.T) {
	at := func(e *machine.Entry, ms int64) *machine.Entry {
		e.LastTransition = &machine.Transition{Event: machine.EventSchedule, To: e.Status, At: ms, Actor: "x", Reason: "y"}
		e.ToolArguments, e.Description, e.Result = json.RawMessage(`{"a":1}`), "d", json.RawMessage(`{"r":2}`)
		return e
	}
	entries := []*machine.Entry{
		at(pending("a.b", 100), 10),
		at(&machine.Entry{PendingID: "a.c", Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100, ReminderAt: 80, Reminded: true}, 10),
		at(&machine.Entry{PendingID: "a.d", Status: machine.StatePendingApproval, ApprovalTimeoutAt: 100, Overdue: true,
			Escalations: []machine.Escalation{{At: 50, To: []string{"x"}}, {At: 150, To: []string{"y"}}}, Escalated: 1}, 10),
		at(&machine.Entry{PendingID: "a.e", Status: machine.StateScheduled, ScheduledExecutionTime: 200}, 100),
		at(&machine.Entry{PendingID: "a.f", Status: machine.StateScheduled, ScheduledExecutionTime: 100}, 100),
		at(&machine.Entry{PendingID: "a.g", Status: machine.StateApproved}, 100),
		at(executing("a.h", 300), 100),
		at(&machine.Entry{PendingID: "a.k", Status: machine.StateExecuting, Lease: &machine.Lease{ExpiresAt: 300}, ExecutionAttempts: 1, MaxExecutionAttempts: 1}, 100),
		at(&machine.Entry{PendingID: "a.i", Status: machine.StateCompletedSuccess}, 100),
		{PendingID: "a.j", Status: machine.StateScheduled, ScheduledExecutionTime: 300}, // never moved: no last transition
	}
	finished := 0
	var scratch machine.Entry // as the timer's view: filled again for each head
	for i, e := range entries {
		data, err := json.Marshal(e)
		require.NoError(t, err)
		head, err := views.DecodeCallHead(data)
		require.NoError(t, err)
		head.Fill(&scratch)
		want := observationOf(e, uint64(i))
		assert.Equal(t, want, observationOf(&scratch, uint64(i)), e.PendingID)
		if want.finished {
			finished++
			assert.Equal(t, int64(100), want.since, "when it finished, its retention's start")
		}
	}
	assert.Equal(t, 1, finished, "the one finished call")
}

// BenchmarkDeadlines_Memory is what the timer's schedule holds per call:
// 1M pending calls observed, then the heap measured after a collection
// ("B/deadline"), and how long a full collection takes with the schedule
// alive ("gc-ms": the collector's marking, which runs beside the timer and
// everything else in the process).
func BenchmarkDeadlines_Memory(b *testing.B) {
	const n = 1_000_000
	entries := make([]machine.Entry, 0, 1000)
	for i := range 1000 {
		entries = append(entries, *pending("", 0))
		entries[i].PendingID = "x" // replaced below
	}
	var bytesPer, gcMs float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newDeadlines()
		aDayAway := time.Now().Add(24 * time.Hour).UnixMilli()
		for i := range n {
			e := &entries[i%len(entries)]
			// An id of its own, as the feed decodes it: the schedule
			// holds on to it or copies it.
			e.PendingID = machine.PendingID(fmt.Sprintf("conv-%06d", i/8), fmt.Sprintf("toolu_%012d", i))
			e.ApprovalTimeoutAt = aDayAway + int64(i%86_400_000)
			s.observe(e, uint64(i+1))
		}
		for i := range entries {
			entries[i].PendingID = ""
		}
		start := time.Now()
		runtime.GC()
		gcMs += float64(time.Since(start)) / float64(time.Millisecond)
		runtime.ReadMemStats(&after)
		require.Equal(b, n, s.len())
		bytesPer += float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(s)
	}
	b.ReportMetric(bytesPer/float64(b.N), "B/deadline")
	b.ReportMetric(gcMs/float64(b.N), "gc-ms")
}

// BenchmarkTimer_FinishedMemory is what the timer holds per finished call
// inside its retention window: 10k and 100k COMPLETED_SUCCESS calls
// observed, then the heap measured after a collection ("B/finished"),
// how many of them the schedule of deadlines holds ("scheduled", 0) and
// the retirements ("queued"), and how long a full collection takes
// ("gc-ms"). (Before the retirements, each was a deadline in the
// schedule: 115 and 109 B/finished, all scheduled.) The calls' ids are made
// before the first measure and kept alive after the second, as in serve,
// where the call index holds each key's string (the feed's, one a call):
// B/finished is what the timer adds to it.
func BenchmarkTimer_FinishedMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("finished=%dk", n/1000), func(b *testing.B) {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = machine.PendingID(fmt.Sprintf("conv-%06d", i/8), fmt.Sprintf("toolu_%012d", i))
			}
			var bytesPer, gcMs, scheduled, queued float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				dl, rt := newDeadlines(), newRetirements(24*time.Hour)
				finishedAt := time.Now().Add(-time.Hour).UnixMilli()
				for i, id := range ids {
					observe(dl, rt, observationOf(&machine.Entry{PendingID: id, Status: machine.StateCompletedSuccess,
						LastTransition: &machine.Transition{At: finishedAt + int64(i)}}, uint64(i+1)))
				}
				start := time.Now()
				runtime.GC()
				gcMs += float64(time.Since(start)) / float64(time.Millisecond)
				runtime.ReadMemStats(&after)
				bytesPer += float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
				scheduled += float64(dl.len())
				queued += float64(rt.len())
				runtime.KeepAlive(dl)
				runtime.KeepAlive(rt)
			}
			runtime.KeepAlive(ids)
			b.ReportMetric(bytesPer/float64(b.N), "B/finished")
			b.ReportMetric(scheduled/float64(b.N), "scheduled")
			b.ReportMetric(queued/float64(b.N), "queued")
			b.ReportMetric(gcMs/float64(b.N), "gc-ms")
		})
	}
}

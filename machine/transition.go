package machine

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/looplab/fsm"
)

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

package history

import (
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/toolgate/toolgate/machine"
)

// madeBy are the events a write of each kind makes, as the transition
// table names them: a submit creates the entry one of three ways, a
// decision approves, rejects or votes, a cancel cancels.
func madeBy(op *Op) []machine.Event {
	switch op.Kind {
	case Submit:
		return []machine.Event{machine.EventAsk, machine.EventSchedule, machine.EventDeny}
	case Decide:
		if op.Approve {
			return []machine.Event{machine.EventApprove, machine.EventVote}
		}
		return []machine.Event{machine.EventReject, machine.EventVote}
	case Cancel:
		return []machine.Event{machine.EventCancel}
	}
	return nil
}

// internal are the events no recorded operation makes: toolgate's own
// (an executor's claim, heartbeat and outcome, the timer's timeout,
// reminder and escalation). They may happen between any two operations,
// as the table allows, and only what a later read sees tells of them.
var internal = func() []machine.Event {
	made := map[machine.Event]bool{}
	for _, op := range []*Op{{Kind: Submit}, {Kind: Decide, Approve: true}, {Kind: Decide}, {Kind: Cancel}} {
		for _, ev := range madeBy(op) {
			made[ev] = true
		}
	}
	var evs []machine.Event
	for _, ev := range machine.Events() {
		if !made[ev] {
			evs = append(evs, ev)
		}
	}
	return evs
}()

// reachable is every state s may be in by the time of the next
// operation: s, and where internal events lead from it.
func reachable(s machine.State) []machine.State {
	seen := []machine.State{s}
	for i := 0; i < len(seen); i++ {
		for _, ev := range internal {
			if to, ok := seen[i].Next(ev); ok && !slices.Contains(seen, to) {
				seen = append(seen, to)
			}
		}
	}
	return seen
}

// effects are the states a write of op's kind may leave an entry in
// that was in s: its event's target, or (an approval or a submit the
// policy lets run) the target and, in the same write, the claim of an
// executor that was waiting.
func effects(s machine.State, op *Op) []machine.State {
	var out []machine.State
	for _, ev := range madeBy(op) {
		to, ok := s.Next(ev)
		if !ok {
			continue
		}
		out = append(out, to)
		if claimed, ok := to.Next(machine.EventStart); ok && ev != machine.EventVote {
			out = append(out, claimed)
		}
	}
	return out
}

// step is the model's step: every state the entry may be in after op,
// given it was in s after the operation before (none when op, answered
// as it was, could not have happened).
func step(s machine.State, op *Op) []machine.State {
	var next []machine.State
	add := func(st machine.State) {
		if !slices.Contains(next, st) {
			next = append(next, st)
		}
	}
	for _, c := range reachable(s) {
		switch {
		case op.Kind == Read:
			if !op.Answered() || op.Status == c {
				add(c)
			}
		case op.Kind == Run:
			if c == machine.StateExecuting {
				add(c)
			}
		case !op.Answered():
			// It may have done nothing, or what it asked.
			add(c)
			for _, e := range effects(c, op) {
				add(e)
			}
		case op.Refused:
			// A refusal changes nothing, and names the entry as stored.
			if op.Status == "" || op.Status == c {
				add(c)
			}
		default:
			if slices.Contains(effects(c, op), op.Status) {
				add(op.Status)
			}
			// A submit sent again answers with the entry as it is.
			if op.Kind == Submit && c != "" && op.Status == c {
				add(c)
			}
		}
	}
	return next
}

// model is one call's sequential specification: a state of machine's
// table, stepped by step.
var model = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{machine.State("")} },
	Step: func(state, input, _ any) []any {
		var out []any
		for _, s := range step(state.(machine.State), input.(*Op)) {
			out = append(out, s)
		}
		return out
	},
	DescribeOperation: func(input, _ any) string { return input.(*Op).String() },
	DescribeState:     func(state any) string { return string(state.(machine.State)) },
}).ToModel()

// linearizable checks one call's operations (Input is the *Op, Output
// unused) against model, within timeout, and returns porcupine's verdict.
func linearizable(ops []*Op, timeout time.Duration) porcupine.CheckResult {
	history := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		ret := int64(math.MaxInt64) // no answer: it may take effect any time after
		if op.Answered() {
			ret = op.Return.UnixNano()
		}
		history[i] = porcupine.Operation{Input: op, Call: op.Invoke.UnixNano(), Return: ret}
	}
	return porcupine.CheckOperationsTimeout(model, history, timeout)
}

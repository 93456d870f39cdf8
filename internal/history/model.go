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

// input is what the model is stepped with: an operation, or one part of
// an answered submit.
type input struct {
	op *Op
	// part splits an answered submit in two, each anywhere within its
	// interval: the write that created the entry (partCreate), and the
	// answer, which says the entry as it was when the answer was made
	// (partAnswer). The client's Submit asks again, with the same
	// identity, when an answer is lost, and the request asked again is
	// answered with the entry as it is by then: created by the first,
	// possibly run and finished since.
	part int
}

const (
	partWhole = iota
	partCreate
	partAnswer
)

// step is the model's step: every state the entry may be in after in,
// given it was in s after the operation before (none when in, answered
// as it was, could not have happened).
func step(s machine.State, in input) []machine.State {
	op := in.op
	var next []machine.State
	add := func(st machine.State) {
		if !slices.Contains(next, st) {
			next = append(next, st)
		}
	}
	for _, c := range reachable(s) {
		switch {
		case in.part == partCreate:
			// The entry is created, or was already (a submit sent
			// again): either way the answer part says what it is.
			if c != "" {
				add(c)
			}
			for _, e := range effects(c, op) {
				add(e)
			}
		case in.part == partAnswer:
			if op.Status == c {
				add(c)
			}
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
		}
	}
	return next
}

// model is one call's sequential specification: a state of machine's
// table, stepped by step.
var model = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{machine.State("")} },
	Step: func(state, in, _ any) []any {
		var out []any
		for _, s := range step(state.(machine.State), in.(input)) {
			out = append(out, s)
		}
		return out
	},
	DescribeOperation: func(in, _ any) string {
		i := in.(input)
		switch i.part {
		case partCreate:
			return i.op.String() + " (its write)"
		case partAnswer:
			return i.op.String() + " (its answer)"
		}
		return i.op.String()
	},
	DescribeState: func(state any) string { return string(state.(machine.State)) },
}).ToModel()

// linearizable checks one call's operations (each an input, an answered
// submit two; Output unused) against model, within timeout, and returns
// porcupine's verdict.
func linearizable(ops []*Op, timeout time.Duration) porcupine.CheckResult {
	var history []porcupine.Operation
	for _, op := range ops {
		ret := int64(math.MaxInt64) // no answer: it may take effect any time after
		if op.Answered() {
			ret = op.Return.UnixNano()
		}
		parts := []int{partWhole}
		if op.Kind == Submit && op.Answered() && !op.Refused {
			parts = []int{partCreate, partAnswer}
		}
		for _, part := range parts {
			history = append(history, porcupine.Operation{Input: input{op: op, part: part}, Call: op.Invoke.UnixNano(), Return: ret})
		}
	}
	return porcupine.CheckOperationsTimeout(model, history, timeout)
}

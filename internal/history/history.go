// Package history records what toolgate's clients did and were told
// while a test ran (every submit, decision, cancel, read and tool run,
// each with the time it was invoked and the time it was answered) and
// checks it afterwards: each call's operations against a model whose
// step is machine's transition table, with porcupine's linearizability
// checker, and the promises toolgate makes of the calls' stored
// revisions, events and tool runs (Check).
package history

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// Kind is what an operation did.
type Kind string

// The operations a history records.
const (
	// Submit creates the call (or, sent again, answers with it as it is).
	Submit Kind = "submit"
	// Decide approves (Op.Approve) or rejects the call.
	Decide Kind = "decide"
	// Cancel cancels the call.
	Cancel Kind = "cancel"
	// Read observes the call's status: a get, or an await's final answer
	// (which tells the timer's expiries and the executors' outcomes).
	Read Kind = "read"
	// Run is one run of the call's handler, from its start to its end as
	// the tool itself reports them: the call was executing meanwhile.
	Run Kind = "run"
)

// Op is one operation of one client on one call.
type Op struct {
	Call    string // the call's pendingId
	Client  string // who made it: "agent-3", "approver", an executor's pid
	Kind    Kind
	Approve bool // Decide: an approval, not a rejection

	Invoke time.Time
	// Return is when the answer came; zero when none did (the outcome
	// is unknown: it may have taken effect at any time after Invoke).
	Return time.Time
	// Status is the call's status the answer reported: the entry a
	// write returned, or the stored one a refusal named, or what a read
	// saw. "" with Refused: a refusal that named no entry.
	Status  machine.State
	Refused bool   // the write was refused (a conflict): it changed nothing
	Err     string // why there was no answer, or the refusal's message
	// Token is a run's fencing token, when its handler was given one.
	Token string
}

// Answered reports whether the operation's answer came.
func (o *Op) Answered() bool { return !o.Return.IsZero() }

func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", o.Invoke.UTC().Format("15:04:05.000"), o.Client, o.Kind)
	if o.Kind == Decide {
		if o.Approve {
			b.WriteString(" approve")
		} else {
			b.WriteString(" reject")
		}
	}
	if o.Token != "" {
		fmt.Fprintf(&b, " token %s", o.Token)
	}
	switch {
	case !o.Answered():
		fmt.Fprintf(&b, " → no answer (%s)", o.Err)
	case o.Refused:
		fmt.Fprintf(&b, " → refused, %s, at %s: %s", cmpOr(string(o.Status), "entry not named"), o.Return.UTC().Format("15:04:05.000"), o.Err)
	default:
		fmt.Fprintf(&b, " → %s at %s", o.Status, o.Return.UTC().Format("15:04:05.000"))
	}
	return b.String()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Recorder collects the operations of a run, from any goroutine.
type Recorder struct {
	mu  sync.Mutex
	ops []*Op
}

// Invoke records that client starts kind on call now, and returns the
// operation for its answer.
func (r *Recorder) Invoke(call, client string, kind Kind) *Pending {
	return &Pending{r: r, op: Op{Call: call, Client: client, Kind: kind, Invoke: time.Now()}}
}

// Add records a whole operation, for one whose times come from elsewhere
// (a tool's run as its log says).
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, &op)
}

// Ops returns every operation recorded so far, in the order they were
// answered (or given up on).
func (r *Recorder) Ops() []*Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Pending is an operation invoked and not yet answered.
type Pending struct {
	r  *Recorder
	op Op
}

// Decision marks a Decide as an approval or a rejection.
func (p *Pending) Decision(approve bool) *Pending {
	p.op.Approve = approve
	return p
}

// For renames the call, for a submit whose pendingId the test learns
// only from its answer.
func (p *Pending) For(call string) *Pending {
	p.op.Call = call
	return p
}

// Answered records the answer: the status it reported.
func (p *Pending) Answered(status machine.State) {
	p.op.Return, p.op.Status = time.Now(), status
	p.r.Add(p.op)
}

// Refused records a refusal that named the entry as stored (status ""
// if it named none).
func (p *Pending) Refused(status machine.State, err error) {
	p.op.Return, p.op.Status, p.op.Refused = time.Now(), status, true
	if err != nil {
		p.op.Err = err.Error()
	}
	p.r.Add(p.op)
}

// Unanswered records that no answer came: the operation may or may not
// have taken effect.
func (p *Pending) Unanswered(err error) {
	if err != nil {
		p.op.Err = err.Error()
	}
	p.r.Add(p.op)
}

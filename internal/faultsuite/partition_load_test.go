package faultsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/history"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The kinds of call the partition load mixes, by what becomes of them.
const (
	kindAuto    = "auto"    // runs at once (team auto)
	kindApprove = "approve" // the approver approves it, then it runs
	kindReject  = "reject"  // the approver rejects it
	kindCancel  = "cancel"  // its agent cancels it while it waits
	kindExpire  = "expire"  // nobody decides it: the timer rejects it (team expire)
)

// loadKinds is the mix, one kind per call in turn.
var loadKinds = []string{kindAuto, kindApprove, kindApprove, kindReject, kindAuto, kindCancel, kindApprove, kindExpire}

// partitionPolicy gates exec: a human decides it, but team auto's calls
// run at once and team expire's time out after 2s; probes are denied.
const partitionPolicy = `default:
  requiresApprovalTools: [exec]
  approvalTimeoutMs: 120000
  rules:
    deny: ["probe"]
teams:
  auto:
    requiresApprovalTools: none
  expire:
    approvalTimeoutMs: 2000
`

// loadCall is one call of a scenario's load.
type loadCall struct {
	toolCallID, pendingID, kind string
}

// partitionLoad is a scenario's load: agents submitting calls of every
// kind and awaiting them, an approver deciding, agents cancelling; every
// operation recorded in rec.
type partitionLoad struct {
	t        *testing.T
	scenario string // the calls' conversation
	rec      *history.Recorder
	calls    []*loadCall

	tokens               chan int
	let                  int
	submitted, answered  atomic.Int64
	acked                atomic.Int64 // submits answered with the call's entry
	agents, approverDone sync.WaitGroup
	toDecide             chan *loadCall

	mu           sync.Mutex
	selfRefusals []string // first attempts refused as conflicting with their own write (record)
}

// clients are the test's agents and approver, each connected through
// links of its own (partitionCluster.dialer), kept from one scenario to
// the next.
type loadClients struct {
	agents   []*client.Client
	approver *client.Client
}

func newLoadClients(t *testing.T, c *partitionCluster, agents int) *loadClients {
	t.Helper()
	lc := &loadClients{}
	connect := func(who, role string) *client.Client {
		o, err := client.Credentials(server.CredsPath(c.auth, role))
		require.NoError(t, err)
		nc, err := nats.Connect(c.dialer(t, who), append(o, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name(who))...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		cl, err := client.New(nc)
		require.NoError(t, err)
		return cl
	}
	for a := range agents {
		lc.agents = append(lc.agents, connect(fmt.Sprintf("agent-%d", a), "agent"))
	}
	lc.approver = connect("approver", "approver")
	return lc
}

// startLoad makes n calls of scenario and starts the agents and the
// approver on them; letThrough hands them the calls.
func startLoad(t *testing.T, lc *loadClients, scenario string, n int, execArgs json.RawMessage) *partitionLoad {
	l := &partitionLoad{t: t, scenario: scenario, rec: &history.Recorder{}, tokens: make(chan int, n), toDecide: make(chan *loadCall, n)}
	for i := range n {
		id := fmt.Sprintf("%s-%d", scenario, i)
		l.calls = append(l.calls, &loadCall{toolCallID: id, pendingID: machine.PendingID(scenario, id), kind: loadKinds[i%len(loadKinds)]})
	}
	ctx := context.WithoutCancel(t.Context())
	l.approverDone.Go(func() {
		var each sync.WaitGroup
		defer each.Wait()
		for lcall := range l.toDecide {
			each.Go(func() { l.decide(ctx, lc.approver, lcall) })
		}
	})
	for a, ag := range lc.agents {
		who := fmt.Sprintf("agent-%d", a)
		l.agents.Go(func() {
			for i := range l.tokens {
				l.run(ctx, who, ag, l.calls[i], execArgs)
			}
		})
	}
	return l
}

// letThrough lets the agents take the calls up to upTo.
func (l *partitionLoad) letThrough(upTo int) {
	for ; l.let < min(upTo, len(l.calls)); l.let++ {
		l.tokens <- l.let
	}
}

// answerWithin is how long an agent waits for its call's final answer:
// past it, the agent is left without one, which the checker reports.
const answerWithin = 2 * time.Minute

// run is one agent's work on one call: submit, hand it to the approver
// or cancel it, await its final answer.
func (l *partitionLoad) run(ctx context.Context, who string, c *client.Client, lcall *loadCall, args json.RawMessage) {
	ctx, cancel := context.WithTimeout(ctx, answerWithin)
	defer cancel()
	call := machine.Call{ToolCallID: lcall.toolCallID, ToolName: "exec", Arguments: args, CallerBotID: "agent", ConversationID: l.scenario}
	switch lcall.kind {
	case kindAuto:
		call.Team = "auto"
	case kindExpire:
		call.Team = "expire"
	}
	op := l.rec.Invoke(lcall.pendingID, who, history.Submit)
	e, err := c.Submit(ctx, call)
	l.submitted.Add(1)
	if !l.record(op, e, err, "", "", 1) {
		return
	}
	l.acked.Add(1)
	if e.Status == machine.StatePendingApproval {
		switch lcall.kind {
		case kindApprove, kindReject:
			l.toDecide <- lcall
		case kindCancel:
			for attempt := 1; ctx.Err() == nil; attempt++ {
				op := l.rec.Invoke(lcall.pendingID, who, history.Cancel)
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				e, err := c.Cancel(actx, lcall.pendingID, "agent", "partition test")
				acancel()
				if l.record(op, e, err, "agent", machine.EventCancel, attempt) || refused(err) {
					break
				}
			}
		}
	}
	read := l.rec.Invoke(lcall.pendingID, who, history.Read)
	out, err := c.Await(ctx, lcall.pendingID, client.UntilFinished())
	l.answered.Add(1)
	var rejected *client.RejectedError
	var failed *client.ExecutionError
	switch {
	case errors.As(err, &rejected):
		read.Answered(rejectedState[rejected.Kind])
	case errors.As(err, &failed):
		read.Answered(machine.StateCompletedFailure)
	case err != nil:
		read.Unanswered(err)
	case out.Kind == client.Executed:
		read.Answered(machine.StateCompletedSuccess)
	default:
		read.Unanswered(fmt.Errorf("await answered %s, not a final answer", out.Kind))
	}
}

var rejectedState = map[client.Rejection]machine.State{
	client.RejectedByUser:    machine.StateRejectedByUser,
	client.RejectedByTimeout: machine.StateRejectedByTimeout,
	client.Cancelled:         machine.StateCancelled,
	client.DeniedByPolicy:    machine.StateRejectedByPolicy,
}

// decide sends the approver's decision until it is answered or refused.
// A refusal is its own decision that landed without its answer, or the
// timer's that came first: the checker tells which from what it names.
func (l *partitionLoad) decide(ctx context.Context, c *client.Client, lcall *loadCall) {
	approve := lcall.kind == kindApprove
	ev := machine.EventReject
	if approve {
		ev = machine.EventApprove
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		op := l.rec.Invoke(lcall.pendingID, "approver", history.Decide).Decision(approve)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := c.Decide(actx, wire.DecideRequest{PendingID: lcall.pendingID, Approved: approve, By: "approver", Reason: "partition test"})
		cancel()
		if l.record(op, e, err, "approver", ev, attempt) || refused(err) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// record records a write's answer: the entry it returned, the entry a
// refusal named, or none. It reports whether the write was answered
// with an entry.
//
// A refusal that names an entry that records the very transition the
// write asked for, made by its own identity (actor and ev), is the
// write's own, applied without its answer reaching the requester: on
// a retry (attempt > 1), the first attempt's; on a first attempt,
// toolgate's own retry of a store write whose answer it lost, answered
// as a conflict with itself. Either way the write may have taken
// effect: it is recorded as unanswered, and the second kind is kept in
// selfRefusals, for the scenario to report.
func (l *partitionLoad) record(op *history.Pending, e *machine.Entry, err error, actor string, ev machine.Event, attempt int) bool {
	var apiErr *wire.APIError
	switch {
	case err == nil:
		op.Answered(e.Status)
		return true
	case refused(err) && errors.As(err, &apiErr) && apiErr.Entry != nil && madeBy(apiErr.Entry, actor, ev):
		op.Unanswered(fmt.Errorf("refused, naming its own %s as the entry's (taken as applied): %w", ev, err))
		if attempt == 1 {
			l.mu.Lock()
			l.selfRefusals = append(l.selfRefusals, fmt.Sprintf("%s: %s's first %s refused: %v", apiErr.Entry.PendingID, actor, ev, err))
			l.mu.Unlock()
		}
	case refused(err) && errors.As(err, &apiErr) && apiErr.Entry != nil:
		op.Refused(apiErr.Entry.Status, err)
	case refused(err):
		op.Refused("", err)
	default:
		op.Unanswered(err)
	}
	return false
}

// madeBy reports whether e records ev as actor's: the decision the
// entry keeps (whatever was written after it), or a cancel, which is
// terminal and so the last write.
func madeBy(e *machine.Entry, actor string, ev machine.Event) bool {
	switch {
	case actor == "":
		return false
	case ev == machine.EventApprove:
		return e.ApprovedOrRejectedByUserID == actor && e.Status != machine.StateRejectedByUser
	case ev == machine.EventReject:
		return e.ApprovedOrRejectedByUserID == actor && e.Status == machine.StateRejectedByUser
	}
	t := e.LastTransition
	return t != nil && t.Event == ev && t.Actor == actor
}

// refused reports whether err is toolgate's refusal (the request was
// answered: it changed nothing), not a lost answer.
func refused(err error) bool {
	var apiErr *wire.APIError
	return errors.As(err, &apiErr) && apiErr.Status < 500
}

// wait waits for every agent's answer (they give up after answerWithin)
// and for the approver, once every call was let through.
func (l *partitionLoad) wait() {
	l.letThrough(len(l.calls))
	close(l.tokens)
	l.agents.Wait()
	close(l.toDecide)
	l.approverDone.Wait()
}

// execScript is the exec tool's command: it logs its start and end, each
// with the call, the executor's pid, the time and the fencing token the
// executor gave it, and runs for 300ms between.
func execScript(runsLog string) json.RawMessage {
	line := func(what string) string {
		return fmt.Sprintf(`echo "%s $TOOLGATE_TOOL_CALL_ID $PPID $(date +%%s%%N) $TOOLGATE_FENCING_TOKEN" >> %s`, what, runsLog)
	}
	args, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", line("start") + "; sleep 0.3; " + line("end")}})
	return args
}

// loggedRun is a run of the exec tool as execScript logged it.
type loggedRun struct {
	toolCallID string
	pid        int
	token      string
	start, end time.Time // end zero: it never ended
}

// readLoggedRuns reads the runs log, pairing each end with its start.
func readLoggedRuns(t *testing.T, path string) []*loggedRun {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var runs []*loggedRun
	open := map[string]*loggedRun{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue // a line cut short
		}
		pid, _ := strconv.Atoi(fields[2])
		ns, _ := strconv.ParseInt(fields[3], 10, 64)
		token := ""
		if len(fields) > 4 {
			token = fields[4]
		}
		key := fields[1] + " " + fields[2] + " " + token
		switch fields[0] {
		case "start":
			r := &loggedRun{toolCallID: fields[1], pid: pid, token: token, start: time.Unix(0, ns)}
			runs = append(runs, r)
			open[key] = r
		case "end":
			if r := open[key]; r != nil {
				r.end = time.Unix(0, ns)
				delete(open, key)
			}
		}
	}
	require.NoError(t, sc.Err())
	return runs
}

package faultsuite

// Resource faults: the whole NATS cluster stopped and
// started again under load. docs/faults.md says what it does and what it
// measured.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// restartDown is how long the whole cluster stays stopped: longer than
// the intake's --nats-outage-limit (so that it exits for its supervisor)
// and than the short team's approval timeout (so that deadlines pass
// while nothing runs).
const restartDown = 3 * time.Second

// restartCall is one call of the load and what became of it.
type restartCall struct {
	toolCallID string
	kind       string // auto (runs at once), approve, reject, short (nobody decides: its approval times out)
	held       bool   // submitted just before the stop; decided only after the restart

	pendingID string // set once the submit is acknowledged
	decided   bool   // the approver's decision was acknowledged
	answered  bool
	answer    string
	answerErr error
}

// TestResource_WholeClusterRestart SIGKILLs all three nats-servers of a
// cluster at once while agents submit calls, an approver decides them and
// an executor runs them, keeps the cluster down for restartDown and
// starts it again on the same stores. toolgate runs as two supervised
// processes: intake, relay and timer with --nats-outage-limit 2s (it
// exits during the outage, and its supervisor starts it again), and an
// executor with the default limit (it reconnects). After the restart:
// every acknowledged submit and decision is there, the calls held for a
// decision are still pending (and run once approved), every runnable
// call runs exactly once, the approvals whose deadlines passed while the
// cluster was down time out, every transition has its one event, and
// every agent gets its answer. (The executor's lease, 30s, outlasts the
// outage: the call it runs at the stop is reported after the restart,
// not run again.) It logs how long writes took to come back
// after the start.
func TestResource_WholeClusterRestart(t *testing.T) {
	t.Parallel()
	began := time.Now()
	mark := func(format string, args ...any) { logMark(t, began, format, args...) }
	cluster := startNATSCluster(t, 3)
	mark("cluster up")

	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(`default:
  requiresApprovalTools: [exec]
  rules:
    deny: ["probe"]
teams:
  auto:
    requiresApprovalTools: none
  short:
    approvalTimeoutMs: 2500
`), 0o600))
	runsLog := filepath.Join(dir, "runs.log")
	nats := []string{"--nats", cluster.URLs, "--replicas", "3"}
	core := superviseServe(t, "intake, relay and timer", slices.Concat(nats, []string{"--roles", "intake,relay,timer", "--data", cluster.auth,
		"--policy", policyFile, "--relay-ack-wait", "1s", "--nats-outage-limit", "2s"})...)
	executorRole := superviseServe(t, "executor", slices.Concat(nats, []string{"--roles", "executor", "--data", filepath.Join(dir, "executor"),
		"--tools", "exec", "--executor-lease", "30s"})...)
	mark("toolgate serving")
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range cluster.servers {
				t.Logf("--- nats-server %s: warnings and errors:\n%s", s.Name, grepNATS(s.log.String()))
			}
		}
	})

	_, js := cluster.connectTo(t, "", cluster.servers[0])
	approverNC, _ := cluster.connectTo(t, server.CredsPath(cluster.auth, "approver"), cluster.servers[1])
	approver, err := client.New(approverNC)
	require.NoError(t, err)
	script := fmt.Sprintf(`echo "start $TOOLGATE_TOOL_CALL_ID $PPID" >> %[1]s; sleep 0.5; echo "end $TOOLGATE_TOOL_CALL_ID $PPID" >> %[1]s`, runsLog)
	execArgs, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", script}})
	teams := map[string]string{"auto": "auto", "short": "short"}

	var (
		mu         sync.Mutex // guards calls and every restartCall
		calls      []*restartCall
		next       atomic.Int64
		answered   atomic.Int64
		submitting atomic.Bool
		decideErrs atomic.Int64 // decisions asked again (no answer, or refused while the cluster was down)
	)
	submitting.Store(true)
	ctx := t.Context()

	// The approver decides each call handed to it, asking again until
	// toolgate answers. A conflict is its own decision that landed
	// without its answer.
	toDecide := make(chan *restartCall, 1000)
	var deciding sync.WaitGroup
	deciding.Go(func() {
		var each sync.WaitGroup
		defer each.Wait()
		for rc := range toDecide {
			each.Go(func() {
				d := wire.DecideRequest{PendingID: rc.pendingID, Approved: rc.kind == "approve", By: "approver", Reason: "restart test"}
				for ctx.Err() == nil {
					dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := approver.Decide(dctx, d)
					cancel()
					if err == nil || errors.Is(err, machine.ErrConflict) {
						mu.Lock()
						rc.decided = err == nil
						mu.Unlock()
						return
					}
					decideErrs.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	})

	// run submits a call, asking again (the same call: a submit is
	// idempotent) until toolgate acknowledges it, hands it to the
	// approver unless it is held or nobody decides it, and awaits its
	// end, asking again while the answer does not come.
	run := func(agent *client.Client, rc *restartCall) {
		actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		call := machine.Call{ToolCallID: rc.toolCallID, ToolName: "exec", Arguments: execArgs, CallerBotID: "agent", ConversationID: "restart", Team: teams[rc.kind]}
		var e *machine.Entry
		var err error
		for {
			if e, err = agent.Submit(actx, call); err == nil || actx.Err() != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			mu.Lock()
			rc.answerErr = fmt.Errorf("submit: %w", err)
			mu.Unlock()
			return
		}
		mu.Lock()
		rc.pendingID = e.PendingID
		mu.Unlock()
		if !rc.held && (rc.kind == "approve" || rc.kind == "reject") {
			toDecide <- rc
		}
		for {
			out, err := agent.Await(actx, e.PendingID, client.UntilFinished())
			var rejected *client.RejectedError
			var failed *client.ExecutionError
			mu.Lock()
			switch {
			case errors.As(err, &rejected):
				rc.answered, rc.answer = true, "rejected:"+string(rejected.Kind)
			case errors.As(err, &failed):
				rc.answered, rc.answer = true, "failed"
			case err == nil:
				rc.answered, rc.answer = true, string(out.Kind)
			default:
				rc.answerErr = err
			}
			done := rc.answered || actx.Err() != nil
			mu.Unlock()
			if done {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		answered.Add(1)
	}
	kindOf := func(i int64) string {
		switch i % 5 {
		case 0:
			return "auto"
		case 1:
			return "reject"
		case 2:
			return "short"
		}
		return "approve"
	}
	var agents sync.WaitGroup
	for a := range 6 {
		agent := newClusterAgent(t, cluster, a)
		agents.Go(func() {
			for submitting.Load() {
				i := next.Add(1)
				rc := &restartCall{toolCallID: fmt.Sprintf("c%d", i), kind: kindOf(i)}
				mu.Lock()
				calls = append(calls, rc)
				mu.Unlock()
				run(agent, rc)
			}
		})
	}
	bustest.Eventually(t, 60*time.Second, 20*time.Millisecond, "15 calls answered before the stop", func() (bool, any) {
		n := answered.Load()
		return n >= 15, n
	})

	// Just before the stop, once the executor runs a call: calls held
	// for a decision until after the restart, and calls whose approval
	// times out while the cluster is down.
	probes := &probeLog{mu: &mu}
	prober := newProber(t, cluster, probes, "restart")
	holder := newClusterAgent(t, cluster, 2)
	waitFor(t, 60*time.Second, func() (bool, string) {
		return openRunBy(t, runsLog, executorRole.pids()[0]), fmt.Sprintf("%d runs logged", len(readRuns(t, runsLog)))
	}, "the executor runs no call")
	var held []*restartCall
	for i := range 6 {
		rc := &restartCall{toolCallID: fmt.Sprintf("held-%d", i), kind: "approve", held: true}
		if i%2 == 1 {
			rc.kind = "short"
		}
		held = append(held, rc)
		mu.Lock()
		calls = append(calls, rc)
		mu.Unlock()
		agents.Go(func() { run(holder, rc) })
	}
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the held calls acknowledged", func() (bool, any) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, rc := range held {
			if rc.pendingID != "" {
				n++
			}
		}
		return n == len(held), n
	})

	// Every member SIGKILLed at once, while the executor runs a call.
	mark("%d calls answered; SIGKILLing every nats-server", answered.Load())
	var killing sync.WaitGroup
	for _, s := range cluster.servers {
		killing.Go(s.kill)
	}
	killing.Wait()
	killed := time.Now()
	mark("the cluster is down")
	time.Sleep(restartDown)
	var starting sync.WaitGroup
	bin := natsServerBinary(t)
	for _, s := range cluster.servers {
		starting.Go(func() { s.start(t, bin) })
	}
	starting.Wait()
	started := time.Now()
	mark("every nats-server started again")
	prober.start(started)
	// When JetStream has a meta leader that sees every peer again, for
	// the log.
	var metaLed atomic.Int64
	go func() {
		for ctx.Err() == nil && metaLed.Load() == 0 {
			for _, s := range cluster.servers {
				if l, _ := cluster.metaLeader(s); l != "" && metaLed.Load() == 0 {
					metaLed.Store(int64(time.Since(started)))
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	recovery, sent := prober.wait("the cluster's restart")
	mark("the first submit went through %s after the start (%d probes; %s after the kill); JetStream's meta leader came %s after the start, the intake served again %s after the start",
		recovery.Round(time.Millisecond), sent, (started.Sub(killed) + recovery).Round(time.Millisecond),
		time.Duration(metaLed.Load()).Round(time.Millisecond), core.lastServing().Sub(started).Round(time.Millisecond))

	// The held calls are still pending (those whose approval has not
	// timed out); then the approver decides them.
	for _, rc := range held {
		e := getEventually(t, holder, rc.pendingID)
		if rc.kind == "approve" {
			assert.Equal(t, machine.StatePendingApproval, e.Status, "%s, held for a decision across the restart", rc.pendingID)
			toDecide <- rc
		}
	}

	at := answered.Load()
	bustest.Eventually(t, 90*time.Second, 20*time.Millisecond, "15 calls answered after the restart", func() (bool, any) {
		n := answered.Load()
		return n >= at+15, n
	})
	submitting.Store(false)
	agentsDone := make(chan struct{})
	go func() { agents.Wait(); close(agentsDone) }()
	select {
	case <-agentsDone:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		var waiting []string
		for _, rc := range calls {
			if !rc.answered {
				waiting = append(waiting, fmt.Sprintf("%s %s: %v", rc.toolCallID, rc.pendingID, rc.answerErr))
			}
		}
		mu.Unlock()
		t.Fatalf("agents still waiting 2 minutes after the load stopped: %v", waiting)
	}
	close(toDecide)
	deciding.Wait()
	mark("every agent answered")
	if !poll(60*time.Second, func() bool { return len(unsettledCalls(t, js)) == 0 && bustest.Relayed(ctx, js) }) {
		t.Fatalf("not settled 60s after the load: unsettled %v; %s", unsettledCalls(t, js), relayState(t, js))
	}
	mark("settled and relayed")

	revs := callRevisions(t, js)
	events := allEventIDs(t, js)
	runs := readRuns(t, runsLog)
	final := map[string]*machine.Entry{}
	for id, rs := range revs {
		final[id] = rs[len(rs)-1].entry
	}
	runsOf := map[string]int{}
	for _, r := range runs {
		runsOf[r.toolCallID]++
	}
	mu.Lock()
	defer mu.Unlock()
	var lost, lostDecisions, notTimedOut, notOnce, afterReject, unanswered, wrong []string
	var lateness []time.Duration // a timeout whose deadline passed while the cluster was down: from the restart to the timeout
	acked := 0
	for _, rc := range calls {
		if rc.pendingID == "" {
			unanswered = append(unanswered, fmt.Sprintf("%s: never acknowledged: %v", rc.toolCallID, rc.answerErr))
			continue
		}
		acked++
		e := final[rc.pendingID]
		switch {
		case e == nil:
			lost = append(lost, rc.pendingID+": acknowledged, no entry")
			continue
		case !e.Status.Terminal():
			lost = append(lost, fmt.Sprintf("%s: %s at the end", rc.pendingID, e.Status))
		}
		switch {
		case !rc.answered:
			unanswered = append(unanswered, fmt.Sprintf("%s: %v", rc.pendingID, rc.answerErr))
		case rc.answer != answerFor(e):
			wrong = append(wrong, fmt.Sprintf("%s: told %s, the entry is %s", rc.pendingID, rc.answer, e.Status))
		}
		if rc.decided && (rc.kind == "approve") != (e.Status == machine.StateCompletedSuccess || e.Status == machine.StateCompletedFailure) {
			lostDecisions = append(lostDecisions, fmt.Sprintf("%s: %s acknowledged, ended %s", rc.pendingID, rc.kind, e.Status))
		}
		if rc.kind == "short" {
			if e.Status != machine.StateRejectedByTimeout {
				notTimedOut = append(notTimedOut, fmt.Sprintf("%s: ended %s", rc.pendingID, e.Status))
			} else if deadline := time.UnixMilli(e.ApprovalTimeoutAt); deadline.After(killed) && deadline.Before(started) {
				for _, tr := range e.Transitions() {
					if tr.Event == machine.EventTimeout {
						lateness = append(lateness, time.UnixMilli(tr.At).Sub(started))
					}
				}
			}
		}
		n := runsOf[rc.toolCallID]
		if isRejected(e.Status) && n > 0 {
			afterReject = append(afterReject, fmt.Sprintf("%s: ran %d times, ended %s", rc.pendingID, n, e.Status))
		}
		if e.Status == machine.StateCompletedSuccess && n != 1 {
			notOnce = append(notOnce, fmt.Sprintf("%s: ran %d times", rc.pendingID, n))
		}
	}
	for _, fc := range probes.calls {
		if fc.pendingID == "" {
			continue
		}
		acked++
		if e := final[fc.pendingID]; e == nil || !e.Status.Terminal() {
			lost = append(lost, fmt.Sprintf("probe %s: acknowledged, %v at the end", fc.pendingID, e))
		}
	}
	missingEvents, doubledEvents := eventGaps(revs, events)
	slices.Sort(lateness)
	var counts faultCounts
	counts.figure("calls submitted and acknowledged", acked)
	counts.figure("  of which probes after the restart", len(probes.calls))
	counts.figure("decisions asked again", int(decideErrs.Load()))
	counts.figure("tool runs", len(runs))
	counts.figure("approvals timed out whose deadline passed while down", len(lateness))
	counts.add("lost calls", true, lost)
	counts.add("acknowledged decisions not applied", true, lostDecisions)
	counts.add("approvals that did not time out", true, notTimedOut)
	counts.add("completed calls not run exactly once", true, notOnce)
	counts.add("runs after reject", true, afterReject)
	counts.add("doubled transitions", true, doubledTransitions(revs))
	counts.add("missing events", true, missingEvents)
	counts.add("doubled events", true, doubledEvents)
	counts.add("unanswered agents", true, unanswered)
	counts.add("answers that disagree with the entry", true, wrong)
	var late time.Duration
	if len(lateness) > 0 {
		late = lateness[len(lateness)-1]
	}
	t.Logf("down %s; writes back %s after the start (%s after the kill); the latest timeout of a deadline passed while down came %s after the start; intake, relay and timer: exits %v; executor: pids %v; %s in all; counts:\n%s",
		started.Sub(killed).Round(time.Millisecond), recovery.Round(time.Millisecond), (started.Sub(killed) + recovery).Round(time.Millisecond),
		late.Round(time.Millisecond), core.Exits(), executorRole.pids(), time.Since(began).Round(time.Millisecond), counts.String())
	for _, r := range counts.rows {
		if r.must0 {
			assert.Zero(t, r.n, "%s: %v", r.name, r.examples)
		}
	}
	assert.NotEmpty(t, lateness, "no approval's deadline passed while the cluster was down")
	// The intake exited for its supervisor (its outage limit is shorter
	// than the outage) and served again; the executor reconnected.
	assert.NotEmpty(t, core.Exits(), "the intake's process never exited for its supervisor")
	assert.GreaterOrEqual(t, core.servings(), 2, "the intake's process never served again")
	assert.Len(t, executorRole.pids(), 1, "the executor's process exited: %v", executorRole.Exits())
}

// getEventually reads an entry, asking again while the cluster does not
// answer.
func getEventually(t *testing.T, c *client.Client, pendingID string) *machine.Entry {
	t.Helper()
	var e *machine.Entry
	waitEvery(t, 60*time.Second, 200*time.Millisecond, func() (bool, string) {
		var err error
		e, err = c.Get(t.Context(), pendingID)
		return err == nil, fmt.Sprint(err)
	}, "cannot read %s", pendingID)
	return e
}

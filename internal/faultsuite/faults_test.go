package faultsuite

// The fault-injection test: toolgate's roles as
// separate processes on a real 3-node nats-server cluster, each of them
// SIGKILLed while agents submit, an approver decides and executors run
// calls, then a NATS follower and the calls' stream leader.
// docs/faults.md says how to run the long version and what it measured.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

var (
	faultsCalls  = flag.Int("faults.calls", 200, "TestFaults: calls the agents submit")
	faultsRounds = flag.Int("faults.rounds", 0, "TestFaults: rounds of faults, each killing every role, a NATS follower and the leader once (0: one per 700 calls, at least one)")
	faultsAgents = flag.Int("faults.agents", 8, "TestFaults: agents submitting and awaiting calls at once")
	faultsLogs   = flag.String("faults.logs", "", "TestFaults: a directory to write every process's log to (the last run of each toolgate role, every run of each nats-server)")
)

// The lease outlasts a leader election (4–9s in nats-server), so that a
// call whose heartbeats wait out an election does not run again: a second
// run is then always an executor's death.
const faultsLease = 15 * time.Second

// faultCall is one call of the load and what became of it.
type faultCall struct {
	toolCallID string
	kind       string // auto (runs at once), approve, reject, probe (denied by policy)

	pendingID string // set once the submit is acknowledged
	submitErr error
	decideErr error
	answered  bool // Await returned
	answer    string
	answerErr error
	latency   time.Duration // from submit to answer
}

// faultRole is a toolgate process of one role, killed and started again.
type faultRole struct {
	name  string
	args  []string
	proc  *process   // the current run
	procs []*process // every run
}

func (r *faultRole) start(t *testing.T) {
	t.Helper()
	r.proc = startServe(t, r.args...)
	r.procs = append(r.procs, r.proc)
}

// output is every run's log, each headed by its pid.
func (r *faultRole) output() string {
	var b strings.Builder
	for _, p := range r.procs {
		fmt.Fprintf(&b, "--- pid %d\n%s", p.cmd.Process.Pid, p.output())
	}
	return b.String()
}

// TestFaults runs toolgate's roles (relay, intake, timer, two executors)
// as separate processes on a 3-node nats-server cluster, all real
// processes, while agents submit calls (some run at once, some wait for
// an approver who approves some and rejects others) and await their
// answers. Meanwhile it SIGKILLs and restarts each role in turn, then a
// NATS follower of the calls' stream, then its leader. At the end it
// counts, and each must be 0: calls lost, transitions applied twice,
// events missing or doubled, tools run twice without an executor dying,
// tools run after a rejection, agents left without an answer. The write
// outage after the leader's death must be at most the election plus 2s.
//
// -faults.calls, -faults.rounds and -faults.agents make it longer
// (docs/faults.md).
func TestFaults(t *testing.T) {
	t.Parallel()
	// The phases below are subtests, so that a failure names its step;
	// what must outlive a phase (a process, a nats-server) is started on
	// top, the test itself.
	top := t
	began := time.Now()
	n, rounds, agents := *faultsCalls, *faultsRounds, max(*faultsAgents, 1)
	if rounds <= 0 {
		// A round takes about as long as the load needs for 700 calls:
		// so the faults go on as long as the load does.
		rounds = max((n+350)/700, 1)
	}
	cluster := startNATSCluster(t, 3)
	clusterUp := time.Since(began)

	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(`default:
  requiresApprovalTools: [exec]
  rules:
    deny: ["probe"]
teams:
  auto:
    requiresApprovalTools: none
`), 0o600))
	runsLog := filepath.Join(dir, "runs.log")
	nats := []string{"--nats", cluster.URLs, "--replicas", "3"}
	own := func(name string) []string { return []string{"--data", filepath.Join(dir, name)} }
	roles := []*faultRole{
		{name: "intake", args: slices.Concat(nats, []string{"--roles", "intake", "--data", cluster.auth, "--policy", policyFile})},
		{name: "relay", args: slices.Concat(nats, own("relay"), []string{"--roles", "relay", "--relay-ack-wait", "1s"})},
		{name: "timer", args: slices.Concat(nats, own("timer"), []string{"--roles", "timer"})},
		{name: "executor", args: slices.Concat(nats, own("executor"), []string{"--roles", "executor", "--tools", "exec", "--executor-lease", faultsLease.String()})},
		{name: "executor-2", args: slices.Concat(nats, own("executor-2"), []string{"--roles", "executor", "--tools", "exec", "--executor-lease", faultsLease.String()})},
	}
	for _, r := range roles {
		r.start(t)
	}
	t.Cleanup(func() {
		if *faultsLogs != "" {
			for _, r := range roles {
				_ = os.WriteFile(filepath.Join(*faultsLogs, r.name+".log"), []byte(r.output()), 0o600)
			}
			for _, s := range cluster.servers {
				_ = os.WriteFile(filepath.Join(*faultsLogs, "nats-"+s.Name+".log"), []byte(s.log.String()), 0o600)
			}
		}
		if !t.Failed() {
			return
		}
		for _, r := range roles {
			t.Logf("--- %s: warnings and errors:\n%s", r.name, grepLevels(r.output()))
		}
		for _, s := range cluster.servers {
			t.Logf("--- nats-server %s: warnings and errors:\n%s", s.Name, grepNATS(s.log.String()))
		}
	})
	role := func(name string) *faultRole {
		for _, r := range roles {
			if r.name == name {
				return r
			}
		}
		panic(name)
	}
	t.Logf("cluster up in %s, toolgate's roles in %s more", clusterUp.Round(time.Millisecond), (time.Since(began) - clusterUp).Round(time.Millisecond))

	// The test's own views: toolgate's credential through each member
	// (JetStream lives in toolgate's account).
	admin := map[string]*adminView{}
	for _, s := range cluster.servers {
		nc, js := cluster.connectTo(t, "", s)
		admin[s.Name] = &adminView{nc: nc, js: js}
	}

	// The calls: a quarter run at once (team auto), the rest wait for the
	// approver, who rejects one in three of those.
	calls := make([]*faultCall, n)
	for i := range calls {
		kind := "approve"
		switch {
		case i%4 == 0:
			kind = "auto"
		case i%3 == 0:
			kind = "reject"
		}
		calls[i] = &faultCall{toolCallID: fmt.Sprintf("c%d", i), kind: kind}
	}
	var mu sync.Mutex // guards every faultCall
	probes := &probeLog{mu: &mu}
	script := fmt.Sprintf(`echo "start $TOOLGATE_TOOL_CALL_ID $PPID" >> %[1]s; sleep 0.2; echo "end $TOOLGATE_TOOL_CALL_ID $PPID" >> %[1]s`, runsLog)
	execArgs, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", script}})

	loadCtx, stopLoad := context.WithCancel(t.Context())
	defer stopLoad()

	// The approver: decides each pending call as it is submitted, sending
	// again while toolgate does not answer. A conflict is its own decision
	// that landed without its answer (the entry says who decided).
	approverNC, _ := cluster.connectTo(t, server.CredsPath(cluster.auth, "approver"), cluster.servers[0])
	approver, err := client.New(approverNC)
	require.NoError(t, err)
	toDecide := make(chan *faultCall, n)
	var deciding sync.WaitGroup
	deciding.Go(func() {
		var each sync.WaitGroup
		defer each.Wait()
		for fc := range toDecide {
			each.Go(func() {
				d := wire.DecideRequest{PendingID: fc.pendingID, Approved: fc.kind == "approve", By: "approver", Reason: "fault test"}
				var err error
				for loadCtx.Err() == nil {
					ctx, cancel := context.WithTimeout(loadCtx, 5*time.Second)
					_, err = approver.Decide(ctx, d)
					cancel()
					if err == nil || errors.Is(err, machine.ErrConflict) {
						err = nil
						break
					}
					select {
					case <-loadCtx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
				mu.Lock()
				fc.decideErr = err
				mu.Unlock()
			})
		}
	})

	// The agents: each takes the next call it is let through, submits it,
	// hands it to the approver if it waits for one, and awaits its final
	// answer. The faults below let the calls through a segment at a time,
	// so that every fault meets calls in flight.
	tokens := make(chan int, n)
	var submitted, answered atomic.Int64
	var agentsDone sync.WaitGroup
	for a := range agents {
		c := newClusterAgent(t, cluster, a)
		agentsDone.Go(func() {
			for i := range tokens {
				fc := calls[i]
				call := machine.Call{ToolCallID: fc.toolCallID, ToolName: "exec", Arguments: execArgs, CallerBotID: "agent", ConversationID: "faults"}
				if fc.kind == "auto" {
					call.Team = "auto"
				}
				from := time.Now()
				ctx, cancel := context.WithTimeout(loadCtx, 5*time.Minute)
				e, err := c.Submit(ctx, call)
				submitted.Add(1)
				mu.Lock()
				fc.submitErr = err
				if err == nil {
					fc.pendingID = e.PendingID
				}
				mu.Unlock()
				if err != nil {
					cancel()
					continue
				}
				if e.Status == machine.StatePendingApproval {
					toDecide <- fc
				}
				out, err := c.Await(ctx, e.PendingID, client.UntilFinished())
				cancel()
				answered.Add(1)
				var rejected *client.RejectedError
				var failed *client.ExecutionError
				mu.Lock()
				fc.latency = time.Since(from)
				switch {
				case errors.As(err, &rejected):
					fc.answered, fc.answer = true, "rejected:"+string(rejected.Kind)
				case errors.As(err, &failed):
					fc.answered, fc.answer = true, "failed"
				case err != nil:
					fc.answerErr = err
				default:
					fc.answered, fc.answer = true, string(out.Kind)
				}
				mu.Unlock()
			}
		})
	}

	// The faults, a round at a time: each role in turn, then a follower
	// of the calls' stream, then its leader. The executor goes first, so
	// that its calls' leases run out during the others.
	type fault struct {
		name string
		do   func(t *testing.T)
	}
	var (
		segment         int // calls let through per fault
		killedExecutors = map[int]bool{}
		outages         []leaderKill
		followerOutages []time.Duration
	)
	mark := func(format string, args ...any) { logMark(t, began, format, args...) }
	killRole := func(r *faultRole) {
		pid := r.proc.cmd.Process.Pid
		r.proc.kill()
		mark("SIGKILLed %s (pid %d)", r.name, pid)
		r.start(t)
		mark("%s serving again (pid %d)", r.name, r.proc.cmd.Process.Pid)
	}
	faults := []fault{
		{"executor", func(t *testing.T) {
			x := role("executor")
			pid := x.proc.cmd.Process.Pid
			// Mid-run: while the runs log shows a call of this executor
			// started and not ended.
			waitFor(t, 60*time.Second, func() (bool, string) {
				return openRunBy(t, runsLog, pid), fmt.Sprintf("%d runs logged", len(readRuns(t, runsLog)))
			}, "executor pid %d never ran a call", pid)
			killedExecutors[pid] = true
			killRole(x)
		}},
		{"relay", func(*testing.T) { killRole(role("relay")) }},
		{"intake", func(*testing.T) { killRole(role("intake")) }},
		{"timer", func(*testing.T) { killRole(role("timer")) }},
		{"NATS follower", func(t *testing.T) {
			leader := kvLeader(t, admin)
			meta := cluster.waitMetaLeader(t)
			var victim *natsServer
			for _, s := range cluster.servers {
				if s.Name != leader && (victim == nil || s.Name != meta) {
					victim = s
				}
			}
			p := newProber(top, cluster, probes, "follower-"+victim.Name)
			victim.kill()
			killed := time.Now()
			mark("SIGKILLed nats-server %s, a follower of %s (leader %s, meta leader %s)", victim.Name, "KV_"+wire.CallsBucket, leader, meta)
			// Writes go on with two of three.
			p.start(killed)
			outage, sent := p.wait("killing follower " + victim.Name)
			followerOutages = append(followerOutages, outage)
			mark("the first submit came %s after the kill (%d probes)", outage.Round(time.Millisecond), sent)
			victim.start(top, natsServerBinary(t))
			mark("nats-server %s started again", victim.Name)
			cluster.waitHealthy(t)
			mark("nats-server %s back and the cluster healthy", victim.Name)
		}},
		{"NATS leader", func(t *testing.T) {
			k := killLeader(top, cluster, admin, probes, mark)
			outages = append(outages, k)
			mark("election took %s, the first submit came %s after the kill (%d probes)", k.election.Round(time.Millisecond), k.outage.Round(time.Millisecond), k.probes)
			cluster.server(k.killed).start(top, natsServerBinary(t))
			cluster.waitHealthy(t)
			mark("nats-server %s back and the cluster healthy", k.killed)
		}},
	}
	segment = max(n/(len(faults)*rounds+1), 1)
	let := 0
	letThrough := func(upTo int) {
		for ; let < min(upTo, n); let++ {
			tokens <- let
		}
	}
	letThrough(segment)
	for round := range rounds {
		for _, f := range faults {
			if !t.Run(fmt.Sprintf("round %d: killing the %s", round+1, f.name), func(t *testing.T) {
				// The load goes on after the last fault (a call is
				// submitted), and has not fallen more than two segments
				// behind the faults: the rest keeps every agent busy
				// through this one, and the faults go on as long as the
				// load does.
				at := max(submitted.Load()+1, int64(let-2*segment))
				waitFor(t, 2*time.Minute, func() (bool, string) {
					return submitted.Load() >= at, fmt.Sprintf("%d of %d submitted", submitted.Load(), let)
				}, "round %d, before killing the %s: the load does not progress", round+1, f.name)
				mark("round %d: %d calls submitted, %d answered", round+1, submitted.Load(), answered.Load())
				f.do(t)
			}) {
				t.FailNow()
			}
			letThrough(let + segment)
		}
	}
	letThrough(n)
	close(tokens)
	mark("every call let through")

	// Every agent gets its answer, or the test says who did not.
	t.Run("every agent answered", func(t *testing.T) {
		all := make(chan struct{})
		go func() { agentsDone.Wait(); close(all) }()
		select {
		case <-all:
		case <-time.After(2 * time.Minute):
			mu.Lock()
			var waiting []string
			for _, fc := range calls {
				if fc.pendingID != "" && !fc.answered {
					waiting = append(waiting, fc.pendingID)
				}
			}
			mu.Unlock()
			t.Errorf("agents still waiting 2 minutes after the last call was let through: %v", waiting)
			stopLoad()
			<-all
		}
		mark("every agent answered")
	})
	stopLoad()
	close(toDecide)
	deciding.Wait()

	// Let toolgate settle: every entry in a final state, every revision
	// relayed.
	js := admin[cluster.servers[0].Name].js
	t.Run("settled and relayed", func(t *testing.T) {
		poll(60*time.Second, func() bool { return len(unsettledCalls(t, js)) == 0 })
		if !poll(60*time.Second, func() bool { return bustest.Relayed(t.Context(), js) }) {
			t.Errorf("the relay has not caught up 60s after the last answer: %s", relayState(t, js))
			// Where it is stuck: a Go process prints every goroutine's
			// stack on SIGQUIT (and exits; the next cleanup finds it
			// gone).
			relay := role("relay").proc
			_ = relay.cmd.Process.Signal(syscall.SIGQUIT)
			<-relay.done
			t.Logf("--- relay (pid %d) goroutines on SIGQUIT:\n%s", relay.cmd.Process.Pid, goroutines(relay.output()))
		}
		mark("settled and relayed")
	})

	// Count.
	t.Run("counts", func(t *testing.T) {
		revs := callRevisions(t, js)
		events := allEventIDs(t, js)
		runs := readRuns(t, runsLog)
		final := map[string]*machine.Entry{} // by pendingId
		byToolCall := map[string]string{}    // toolCallId → pendingId
		for id, rs := range revs {
			e := rs[len(rs)-1].entry
			final[id] = e
			byToolCall[e.ToolCallID] = id
		}
		mu.Lock()
		defer mu.Unlock()
		all2 := append(slices.Clone(calls), probes.calls...)
		var lost, unanswered, wrong, submitFailed []string
		acked := 0
		for _, fc := range all2 {
			if fc.submitErr != nil {
				submitFailed = append(submitFailed, fmt.Sprintf("%s: %v", fc.toolCallID, fc.submitErr))
				continue
			}
			if fc.pendingID == "" {
				continue // a probe that was never sent
			}
			acked++
			e := final[fc.pendingID]
			switch {
			case e == nil:
				lost = append(lost, fc.pendingID+": acknowledged, no entry")
			case !e.Status.Terminal():
				lost = append(lost, fmt.Sprintf("%s: %s at the end", fc.pendingID, e.Status))
			}
			if fc.kind == "probe" {
				continue
			}
			if !fc.answered {
				unanswered = append(unanswered, fmt.Sprintf("%s: %v", fc.pendingID, fc.answerErr))
			} else if e != nil && fc.answer != answerFor(e) {
				wrong = append(wrong, fmt.Sprintf("%s: told %s, the entry is %s", fc.pendingID, fc.answer, e.Status))
			}
		}
		for _, fc := range calls {
			if fc.submitErr != nil {
				unanswered = append(unanswered, fmt.Sprintf("%s: submit failed: %v", fc.toolCallID, fc.submitErr))
			}
		}
		doubled := doubledTransitions(revs)
		missingEvents, doubledEvents := eventGaps(revs, events)
		var rerunsNoDeath, afterReject []string
		runsOf := map[string][]*toolRun{}
		for _, r := range runs {
			runsOf[r.toolCallID] = append(runsOf[r.toolCallID], r)
		}
		reruns := 0
		for tc, rs := range runsOf {
			id := byToolCall[tc]
			if e := final[id]; e != nil && isRejected(e.Status) {
				afterReject = append(afterReject, fmt.Sprintf("%s: ran %d times, ended %s", id, len(rs), e.Status))
			}
			for _, r := range rs[:len(rs)-1] {
				reruns++
				if !killedExecutors[r.executor] {
					rerunsNoDeath = append(rerunsNoDeath, fmt.Sprintf("%s: run by executor pid %d (ended %v), then again, though it was not killed", id, r.executor, r.ended))
				}
			}
		}
		slices.Sort(lost)
		slices.Sort(unanswered)
		slices.Sort(rerunsNoDeath)
		slices.Sort(afterReject)

		var counts faultCounts
		counts.figure("calls submitted (and acknowledged)", acked)
		counts.figure("  of which probes during NATS kills", len(probes.calls))
		counts.figure("tool runs", len(runs))
		counts.figure("  of which again after an executor's death", reruns-len(rerunsNoDeath))
		counts.add("lost calls", true, lost)
		counts.add("doubled transitions", true, doubled)
		counts.add("missing events", true, missingEvents)
		counts.add("doubled events", true, doubledEvents)
		counts.add("second runs without an executor death", true, rerunsNoDeath)
		counts.add("runs after reject", true, afterReject)
		counts.add("unanswered agents", true, unanswered)
		counts.add("answers that disagree with the entry", true, wrong)
		var statuses []string
		byStatus := map[machine.State]int{}
		for _, fc := range calls {
			if e := final[fc.pendingID]; e != nil {
				byStatus[e.Status]++
			}
		}
		for s, k := range byStatus {
			statuses = append(statuses, fmt.Sprintf("%s %d", s, k))
		}
		slices.Sort(statuses)
		// How long agents waited, from submit to answer.
		var waits []time.Duration
		for _, fc := range calls {
			if fc.answered {
				waits = append(waits, fc.latency)
			}
		}
		slices.Sort(waits)
		pct := func(p int) time.Duration {
			if len(waits) == 0 {
				return 0
			}
			return waits[min(len(waits)*p/100, len(waits)-1)].Round(time.Millisecond)
		}
		slowest := slices.Clone(calls)
		slices.SortFunc(slowest, func(a, b *faultCall) int { return int(b.latency - a.latency) })
		var slow []string
		for _, fc := range slowest[:min(5, len(slowest))] {
			slow = append(slow, fmt.Sprintf("%s (%s) %s", fc.toolCallID, fc.kind, fc.latency.Round(time.Millisecond)))
		}
		for _, d := range followerOutages {
			t.Logf("follower kill: write outage %s (first submit after the kill)", d.Round(time.Millisecond))
		}
		for _, o := range outages {
			t.Logf("leader kill: %s led %s; election %s (new leader %s); write outage %s (first submit after the kill); %d probes",
				o.killed, "KV_"+wire.CallsBucket, o.election.Round(time.Millisecond), o.newLeader, o.outage.Round(time.Millisecond), o.probes)
		}
		t.Logf("calls: %d by %d agents, %d round(s) of faults; final states: %s; decisions that failed: %d; submits that failed: %d; %s in all",
			n, agents, rounds, strings.Join(statuses, ", "), countDecideErrs(calls), len(submitFailed), time.Since(began).Round(time.Millisecond))
		t.Logf("submit to answer: p50 %s, p90 %s, p99 %s; slowest %s", pct(50), pct(90), pct(99), strings.Join(slow, ", "))
		t.Logf("runnable (approved or scheduled) to claimed by an executor: %s", claimDelays(revs))
		t.Logf("counts:\n%s", counts.String())

		for _, r := range counts.rows {
			if r.must0 {
				assert.Zero(t, r.n, "%s: %v", r.name, r.examples)
			}
		}
		for _, o := range outages {
			assert.LessOrEqual(t, o.outage, o.election+2*time.Second,
				"write outage after killing leader %s: %s, election %s", o.killed, o.outage, o.election)
		}
		if unsettled := unsettledCalls(t, js); len(unsettled) > 0 {
			t.Errorf("entries not final at the end: %v", unsettled)
		}
	})
}

// answerFor is what Await should have said of an entry in its final state.
func answerFor(e *machine.Entry) string {
	switch e.Status {
	case machine.StateCompletedSuccess:
		return string(client.Executed)
	case machine.StateCompletedFailure:
		return "failed"
	case machine.StateRejectedByUser:
		return "rejected:" + string(client.RejectedByUser)
	case machine.StateRejectedByTimeout:
		return "rejected:" + string(client.RejectedByTimeout)
	case machine.StateRejectedByPolicy:
		return "rejected:" + string(client.DeniedByPolicy)
	case machine.StateCancelled:
		return "rejected:" + string(client.Cancelled)
	}
	return "not final: " + string(e.Status)
}

func isRejected(s machine.State) bool {
	switch s {
	case machine.StateRejectedByUser, machine.StateRejectedByTimeout, machine.StateRejectedByPolicy, machine.StateCancelled:
		return true
	}
	return false
}

func countDecideErrs(calls []*faultCall) int {
	n := 0
	for _, fc := range calls {
		if fc.decideErr != nil {
			n++
		}
	}
	return n
}

// grepNATS keeps a nats-server log's warnings, errors and the test's
// notes of its starts and kills.
func grepNATS(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "[WRN]") || strings.Contains(l, "[ERR]") || strings.HasPrefix(l, "---") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// goroutines keeps the goroutine dump at the end of a Go process's
// output.
func goroutines(out string) string {
	if i := strings.Index(out, "SIGQUIT"); i >= 0 {
		return out[i:]
	}
	return out
}

// relayState says where the relay's consumer is.
func relayState(t *testing.T, js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, "KV_"+wire.CallsBucket, relay.RelayDurable)
	if err != nil {
		return err.Error()
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("consumer %s: %d pending, %d acks pending, %d redelivered, delivered up to %d, acked up to %d",
		relay.RelayDurable, info.NumPending, info.NumAckPending, info.NumRedelivered, info.Delivered.Stream, info.AckFloor.Stream)
}

// grepLevels keeps a toolgate log's warnings and errors.
func grepLevels(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.HasPrefix(l, "--- ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// logMark logs a step of a long test, with the time since it began and
// the clock's time (to find the step in the processes' logs).
func logMark(t *testing.T, began time.Time, format string, args ...any) {
	t.Helper()
	now := time.Now()
	t.Logf("%7s  %s  %s", now.Sub(began).Round(10*time.Millisecond), now.UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

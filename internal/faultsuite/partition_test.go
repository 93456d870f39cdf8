package faultsuite

// The partition tests: toolgate's roles as separate processes on a
// 3-node nats-server cluster whose every route and every client
// connection goes through a netfault.Link, under a mixed load, while a
// scenario partitions the network (no process is killed). Every
// operation of the load is recorded and checked afterwards with
// internal/history: linearizable against the transition table, and
// toolgate's promises over the stored revisions, events and tool runs.
// docs/faults.md says what each scenario does and what it measured.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/history"
	"github.com/toolgate/toolgate/internal/netfault"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// partitionCalls is how many calls each scenario's load makes:
// TOOLGATE_PARTITION_CALLS, or 64 (docs/faults.md).
func partitionCalls(t *testing.T) int {
	t.Helper()
	v := os.Getenv("TOOLGATE_PARTITION_CALLS")
	if v == "" {
		return 64
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "TOOLGATE_PARTITION_CALLS: want a number of calls, got %q", v)
	require.Positive(t, n, "TOOLGATE_PARTITION_CALLS: want a number of calls above 0")
	return n
}

// partitionLease is the executors' lease: shorter than an election, so
// that a scenario sees leases run out and calls claimed again.
const partitionLease = 4 * time.Second

// partitionRig is what every scenario runs on.
type partitionRig struct {
	c       *partitionCluster
	admin   map[string]*adminView
	lc      *loadClients
	runsLog string
	args    []byte
	pids    map[int]string // executor pid → its role's name
	procs   map[string]*process
	metrics map[string]string // role's name → its /metrics address
	probes  *probeLog
	began   time.Time
}

func (r *partitionRig) mark(t *testing.T, format string, args ...any) {
	t.Helper()
	logMark(t, r.began, format, args...)
}

// TestPartitions runs each partition scenario in turn on one cluster,
// each under a load of its own (partitionCalls calls by 6 agents, one
// more per 64 calls beyond 384, up to 32; of every eight calls two run at
// once, three are approved and one rejected by the approver, one is
// cancelled by its agent and one times out), and checks each scenario's
// history once its calls settle.
// The load is let through a third before the fault, a third while it
// holds and the rest after it heals.
func TestPartitions(t *testing.T) {
	t.Parallel()
	n := partitionCalls(t)
	rig := startPartitionRig(t, n)
	for _, sc := range partitionScenarios {
		rig.run(t, sc.name, sc.slug, n, sc.fault)
	}
}

// startPartitionRig starts the cluster, toolgate's roles as processes
// (each serving /metrics) and load clients enough for n calls a scenario.
func startPartitionRig(t *testing.T, n int) *partitionRig {
	rig := &partitionRig{began: time.Now(), pids: map[int]string{}, probes: &probeLog{mu: &sync.Mutex{}}, procs: map[string]*process{}, metrics: map[string]string{}}
	c := startPartitionCluster(t)
	rig.c = c
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(partitionPolicy), 0o600))
	rig.runsLog = filepath.Join(dir, "runs.log")
	rig.args = execScript(rig.runsLog)
	creds := server.CredsPath(c.auth, "toolgate")
	serve := func(name string, args ...string) {
		rig.metrics[name] = fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
		rig.procs[name] = startServe(t, slices.Concat([]string{"--nats", c.dialer(t, name), "--nats-creds", creds, "--replicas", "3", "--metrics", rig.metrics[name]}, args)...)
	}
	own := func(name string) []string { return []string{"--data", filepath.Join(dir, name)} }
	serve("intake", "--roles", "intake", "--data", c.auth, "--policy", policyFile)
	serve("relay", slices.Concat(own("relay"), []string{"--roles", "relay", "--relay-ack-wait", "1s"})...)
	serve("timer", slices.Concat(own("timer"), []string{"--roles", "timer"})...)
	for _, x := range []string{"executor-1", "executor-2"} {
		serve(x, slices.Concat(own(x), []string{"--roles", "executor", "--tools", "exec", "--executor-lease", partitionLease.String()})...)
		rig.pids[rig.procs[x].cmd.Process.Pid] = x
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, p := range rig.procs {
			t.Logf("--- %s: warnings and errors:\n%s", name, grepLevels(p.output()))
		}
		for _, s := range c.servers {
			t.Logf("--- nats-server %s: warnings and errors:\n%s", s.Name, grepNATS(s.log.String()))
		}
		t.Logf("--- links:\n%s", c.linkLog())
	})
	rig.admin = map[string]*adminView{}
	for _, s := range c.servers {
		nc, js := c.connectTo(t, "", s)
		rig.admin[s.Name] = &adminView{nc: nc, js: js}
	}
	rig.lc = newLoadClients(t, c, min(max(n/64, 6), 32))
	rig.mark(t, "cluster and roles up")
	return rig
}

// run runs one scenario as a subtest, conversation slug, of n calls.
func (r *partitionRig) run(t *testing.T, name, slug string, n int, fault func(*testing.T, *partitionRig, *partitionLoad)) {
	if !t.Run(name, func(t *testing.T) { r.scenario(t, slug, n, fault) }) {
		// A scenario that failed may leave the network broken: heal
		// it, so that the next one starts whole.
		r.c.healAll()
		r.c.waitHealthy(t)
	}
}

// healAll heals every link.
func (c *partitionCluster) healAll() {
	for _, row := range c.routes {
		for _, l := range row {
			if l != nil {
				l.Heal()
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ls := range c.clients {
		for _, l := range ls {
			l.Heal()
		}
	}
}

// partitionScenario is a fault, applied while the load's second third is
// let through, and healed before it returns.
type partitionScenario struct {
	name, slug string
	fault      func(t *testing.T, r *partitionRig, l *partitionLoad)
}

var partitionScenarios = []partitionScenario{
	{"the calls' stream leader isolated from both followers and its clients", "leader", isolateLeader},
	{"a follower isolated", "follower", isolateFollower},
	{"a route between the leader and a follower flapping", "flap", flapRoute},
	{"an executor cut off from NATS while it holds a claim", "executor", cutExecutor},
	{"replies lost to an agent, the approver and an executor", "oneway", dropReplies},
}

// scenario runs one scenario under its load and checks its history.
func (r *partitionRig) scenario(t *testing.T, slug string, n int, fault func(*testing.T, *partitionRig, *partitionLoad)) {
	from := time.Now()
	l := startLoad(t, r.lc, slug, n, r.args)
	l.letThrough(n / 3)
	waitFor(t, 2*time.Minute, func() (bool, string) {
		return l.submitted.Load() >= int64(n/6), fmt.Sprintf("%d of %d submitted", l.submitted.Load(), l.let)
	}, "%s: the load does not start", slug)
	r.mark(t, "%s: %d calls submitted, %d answered: the fault", slug, l.submitted.Load(), l.answered.Load())
	acked, answered, faulted := l.acked.Load(), l.answered.Load(), time.Now()
	fault(t, r, l)
	r.mark(t, "%s: healed; %d calls submitted, %d answered", slug, l.submitted.Load(), l.answered.Load())
	t.Logf("figure: %s: the fault held %s; meanwhile %d submits acknowledged, %d agents answered", slug,
		time.Since(faulted).Round(time.Millisecond), l.acked.Load()-acked, l.answered.Load()-answered)
	l.wait()
	r.mark(t, "%s: every agent answered", slug)

	js := r.admin[r.c.servers[0].Name].js
	prefix := machine.ConversationKey(slug) + "."
	waitEvery(t, 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		var open []string
		for _, u := range unsettledCalls(t, js) {
			if strings.HasPrefix(u, prefix) {
				open = append(open, u)
			}
		}
		return len(open) == 0, fmt.Sprint(open)
	}, "%s: calls not final", slug)
	waitEvery(t, time.Minute, 200*time.Millisecond, func() (bool, string) {
		return bustest.Relayed(t.Context(), js), relayState(t, js)
	}, "%s: the relay has not caught up", slug)

	report := r.check(t, l, js, prefix)
	l.mu.Lock()
	if len(l.selfRefusals) > 0 {
		t.Logf("finding: %d first attempts refused as conflicting with their own write, which toolgate applied (the history takes them as applied):\n%s", len(l.selfRefusals), strings.Join(l.selfRefusals, "\n"))
	}
	l.mu.Unlock()
	r.mark(t, "%s: checked in %s: %s", slug, time.Since(from).Round(time.Millisecond), strings.SplitN(report.String(), "\n", 2)[0])
	if report.Failed() {
		t.Errorf("%s", report)
	}
}

// check reads what the store and the runs log say of the scenario's
// calls and checks them with its history.
func (r *partitionRig) check(t *testing.T, l *partitionLoad, js jetstream.JetStream, prefix string) *history.Report {
	t.Helper()
	revs := map[string][]history.Revision{}
	for id, rs := range callRevisions(t, js) {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		for _, rv := range rs {
			revs[id] = append(revs[id], history.Revision{Seq: rv.seq, Entry: rv.entry})
		}
	}
	finals := map[machine.State]int{}
	for _, rs := range revs {
		finals[rs[len(rs)-1].Entry.Status]++
	}
	var byState []string
	for st, k := range finals {
		byState = append(byState, fmt.Sprintf("%s %d", st, k))
	}
	slices.Sort(byState)
	t.Logf("figure: %s: final states: %s", l.scenario, strings.Join(byState, ", "))
	events := map[string]int{}
	for id, k := range allEventIDs(t, js) {
		if strings.HasPrefix(id, prefix) {
			events[id] = k
		}
	}
	readAt := time.Now()
	ops := l.rec.Ops()
	for _, run := range readLoggedRuns(t, r.runsLog) {
		if !strings.HasPrefix(run.toolCallID, l.scenario+"-") {
			continue
		}
		ops = append(ops, &history.Op{
			Call: machine.PendingID(l.scenario, run.toolCallID), Client: fmt.Sprintf("%s (pid %d)", r.pids[run.pid], run.pid),
			Kind: history.Run, Invoke: run.start, Return: run.end, Token: run.token,
		})
	}
	return history.Check(ops, history.Facts{Revisions: revs, Events: events, ReadAt: readAt, AnswerWithin: answerWithin})
}

// holdFor holds a fault, letting the load's second third through, for
// at least d from the fault and until a probe submit (a call the policy
// denies: one write, nothing to run) has been acknowledged through one
// member or another: writes go on on the majority's side. It returns
// the write outage the probes measured from the fault. (Agents' answers
// need the relay too, whose consumer may stay on the minority's side
// while the fault holds: docs/faults.md.)
func holdFor(t *testing.T, r *partitionRig, l *partitionLoad, from time.Time, d time.Duration, p *prober) time.Duration {
	t.Helper()
	l.letThrough(2 * len(l.calls) / 3)
	outage, probes := p.wait(fmt.Sprintf("%s: the fault", l.scenario))
	r.mark(t, "%s: the first probe submit was acknowledged %s after the fault (%d probes)", l.scenario, outage.Round(time.Millisecond), probes)
	waitFor(t, d+time.Minute, func() (bool, string) {
		return time.Since(from) >= d, fmt.Sprintf("the fault has held %s", time.Since(from).Round(time.Millisecond))
	}, "%s: the fault does not hold %s", l.scenario, d)
	return outage
}

func cut(links []*netfault.Link) {
	for _, l := range links {
		l.Cut()
	}
}

func heal(links []*netfault.Link) {
	for _, l := range links {
		l.Heal()
	}
}

// isolateLeader cuts the leader of the calls' stream off from both
// followers and from every client, measures the election (until a
// survivor names another leader) and the write outage (probe submits
// through each member in turn), holds the partition 15s from the cut
// while the load goes on, then heals.
func isolateLeader(t *testing.T, r *partitionRig, l *partitionLoad) {
	leader := kvLeader(t, r.admin)
	k := r.c.index(leader)
	var watch *adminView
	for name, v := range r.admin {
		if name != leader {
			watch = v
		}
	}
	p := newProber(t, r.c.natsCluster, r.probes, "isolated-"+leader)
	links := r.c.isolation(k)
	cut(links)
	isolated := time.Now()
	r.mark(t, "isolated nats-server %s, leader of %s (%d links cut)", leader, "KV_"+wire.CallsBucket, len(links))
	p.start(isolated)
	var election time.Duration
	var newLeader string
	waitFor(t, 60*time.Second, func() (bool, string) {
		info, err := streamInfo(watch.js, "KV_"+wire.CallsBucket, 500*time.Millisecond)
		switch {
		case err != nil:
			return false, err.Error()
		case info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == leader:
			return false, fmt.Sprintf("leader %q", info.Cluster.Leader)
		}
		newLeader, election = info.Cluster.Leader, time.Since(isolated)
		return true, ""
	}, "no new leader of %s after isolating %s", "KV_"+wire.CallsBucket, leader)
	r.mark(t, "leader isolation: %s elected after %s", newLeader, election.Round(time.Millisecond))
	r.c.waitIsolated(t, r.c.servers[k], 10*time.Second)
	outage := holdFor(t, r, l, isolated, 15*time.Second, p)
	t.Logf("figure: leader isolated: election %s, write outage %s", election.Round(time.Millisecond), outage.Round(time.Millisecond))
	heal(links)
	r.c.waitHealthy(t)
}

// isolateFollower cuts a follower of the calls' stream (not the meta
// leader, when it can) off from the others and its clients, for 6s.
func isolateFollower(t *testing.T, r *partitionRig, l *partitionLoad) {
	leader := kvLeader(t, r.admin)
	meta := r.c.waitMetaLeader(t)
	k := -1
	for i, s := range r.c.servers {
		if s.Name != leader && (k < 0 || s.Name != meta) {
			k = i
		}
	}
	p := newProber(t, r.c.natsCluster, r.probes, "follower-"+r.c.servers[k].Name)
	links := r.c.isolation(k)
	cut(links)
	from := time.Now()
	p.start(from)
	r.mark(t, "isolated nats-server %s, a follower (leader %s, meta leader %s)", r.c.servers[k].Name, leader, meta)
	r.c.waitIsolated(t, r.c.servers[k], 10*time.Second)
	outage := holdFor(t, r, l, from, 6*time.Second, p)
	t.Logf("figure: follower isolated: write outage %s", outage.Round(time.Millisecond))
	heal(links)
	r.c.waitHealthy(t)
}

// flapRoute cuts and heals the routes between the leader and a follower
// every second, for 6s.
func flapRoute(t *testing.T, r *partitionRig, l *partitionLoad) {
	leader := kvLeader(t, r.admin)
	k := r.c.index(leader)
	j := (k + 1) % len(r.c.servers)
	links := r.c.routesOf(k, j)
	p := newProber(t, r.c.natsCluster, r.probes, "flap")
	for _, link := range links {
		link.Flap(time.Second)
	}
	from := time.Now()
	p.start(from)
	r.mark(t, "flapping the routes between %s (leader) and %s every 1s", leader, r.c.servers[j].Name)
	holdFor(t, r, l, from, 6*time.Second, p)
	heal(links)
	r.c.waitHealthy(t)
}

// cutExecutor cuts executor-1 off from every server while a call of its
// runs, until the call is run again elsewhere (its lease ran out) or
// ends, then lets it reconnect.
func cutExecutor(t *testing.T, r *partitionRig, l *partitionLoad) {
	var pid int
	for p, name := range r.pids {
		if name == "executor-1" {
			pid = p
		}
	}
	var running *loggedRun
	l.letThrough(2 * len(l.calls) / 3)
	waitFor(t, time.Minute, func() (bool, string) {
		runs := readLoggedRuns(t, r.runsLog)
		for _, run := range runs {
			if run.pid == pid && run.end.IsZero() && strings.HasPrefix(run.toolCallID, l.scenario+"-") {
				running = run
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d runs logged", len(runs))
	}, "executor-1 (pid %d) runs none of the calls", pid)
	links := r.c.of("executor-1")
	cut(links)
	r.mark(t, "cut executor-1 (pid %d) off while it runs %s", pid, running.toolCallID)
	id := machine.PendingID(l.scenario, running.toolCallID)
	js := r.admin[r.c.servers[0].Name].js
	waitFor(t, time.Minute, func() (bool, string) {
		for _, run := range readLoggedRuns(t, r.runsLog) {
			if run.toolCallID == running.toolCallID && run.pid != pid {
				return true, ""
			}
		}
		e, err := getEntry(t, js, id)
		if err != nil {
			return false, err.Error()
		}
		return e.Status.Terminal(), string(e.Status)
	}, "%s is neither run again nor finished while executor-1 is cut off", id)
	r.mark(t, "%s run again elsewhere, or finished", id)
	heal(links)
}

// dropReplies loses every reply to agent-0, the approver and
// executor-2, on all their links, while their requests are delivered,
// until the approver has gone unanswered, then heals.
func dropReplies(t *testing.T, r *partitionRig, l *partitionLoad) {
	var links []*netfault.Link
	for _, who := range []string{"agent-0", "approver", "executor-2"} {
		links = append(links, r.c.of(who)...)
	}
	for _, link := range links {
		link.Drop(netfault.FromTarget)
	}
	r.mark(t, "dropping every reply to agent-0, the approver and executor-2")
	l.letThrough(2 * len(l.calls) / 3)
	waitFor(t, 2*time.Minute, func() (bool, string) {
		for _, op := range l.rec.Ops() {
			if op.Client == "approver" && !op.Answered() {
				return true, ""
			}
		}
		return false, "every decision answered so far"
	}, "the approver is never left unanswered")
	heal(links)
}

// getEntry reads a call's entry as stored now.
func getEntry(t *testing.T, js jetstream.JetStream, pendingID string) (*machine.Entry, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.CallsBucket)
	if err != nil {
		return nil, err
	}
	kve, err := kv.Get(ctx, pendingID)
	if err != nil {
		return nil, err
	}
	var e machine.Entry
	if err := json.Unmarshal(kve.Value(), &e); err != nil {
		return nil, err
	}
	return &e, nil
}

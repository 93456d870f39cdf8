package faultsuite

// Resource faults: JetStream's store full under load.
// docs/faults.md says what it does and what it measured.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// storageRefusalWait bounds how long a write refused for want of storage
// may take to be answered: toolgate asks JetStream again for 2s (a full
// leader may hand over), then refuses. Without the mapping, a submit
// waited out its 30s request and the client's 10s of retries.
const storageRefusalWait = 6 * time.Second

// diskCall is one call of the load and what became of it.
type diskCall struct {
	toolCallID string
	kind       string // auto (runs at once), approve, reject

	pendingID string // set once the submit is acknowledged
	submitErr error  // a refusal: must be storage_full
	answered  bool
	answer    string
	answerErr error
}

// TestResource_FullDisk fills the JetStream store of a nats-server (its
// max_file_store, the limit a full disk would be) while agents submit
// calls, an approver decides and an executor runs them, all through a
// toolgate serve process with every role. While the store is full, a
// submit, a decision and an executor's report are each refused, within
// seconds, with an error that says the storage is full (storage_full)
// and changes nothing stored. Then the limit is raised, as an operator
// making room would: the refused requests succeed when asked again, and
// every call acknowledged before goes on to its end, with nothing lost,
// applied twice, run twice or left without its event.
func TestResource_FullDisk(t *testing.T) {
	t.Parallel()
	began := time.Now()
	mark := func(format string, args ...any) { logMark(t, began, format, args...) }
	nats := startNATSStandalone(t, "16MB")
	srv := nats.servers[0]

	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(`default:
  requiresApprovalTools: [exec]
teams:
  auto:
    requiresApprovalTools: none
`), 0o600))
	runsLog := filepath.Join(dir, "runs.log")
	proc := startServe(t, "--nats", nats.URLs, "--replicas", "1", "--data", nats.auth, "--policy", policyFile,
		"--roles", "intake,relay,timer,executor", "--tools", "exec", "--executor-lease", "30s", "--relay-ack-wait", "1s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- toolgate serve: warnings and errors:\n%s", grepLevels(proc.output()))
			t.Logf("--- nats-server: warnings and errors:\n%s", grepNATS(srv.log.String()))
		}
	})
	mark("nats-server and toolgate serving")

	_, js := nats.connectTo(t, "", srv)
	credsOf := func(role string) string { return server.CredsPath(nats.auth, role) }
	approverNC, _ := nats.connectTo(t, credsOf("approver"), srv)
	approver, err := client.New(approverNC)
	require.NoError(t, err)
	executorNC, _ := nats.connectTo(t, credsOf("executor"), srv)
	executor, err := client.New(executorNC)
	require.NoError(t, err)
	probe := newClusterAgent(t, nats, 0)

	script := fmt.Sprintf(`echo "start $TOOLGATE_TOOL_CALL_ID $PPID" >> %[1]s; sleep 0.1; echo "end $TOOLGATE_TOOL_CALL_ID $PPID" >> %[1]s`, runsLog)
	execArgs, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", script}})
	execCall := func(id, team string) machine.Call {
		return machine.Call{ToolCallID: id, ToolName: "exec", Arguments: execArgs, CallerBotID: "agent", ConversationID: "disk", Team: team}
	}

	// Two calls the test decides and runs itself while the store is
	// full: one waiting for a decision, one a tool no executor hosts,
	// claimed by the test's executor before the fill.
	ctx := t.Context()
	held, err := probe.Submit(ctx, execCall("held", ""))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, held.Status)
	manual, err := probe.Submit(ctx, machine.Call{ToolCallID: "manual", ToolName: "manual", CallerBotID: "agent", ConversationID: "disk"})
	require.NoError(t, err)
	claimed, err := executor.Started(ctx, manual.PendingID, "executor")
	require.NoError(t, err)

	// The load: agents submit calls one after another and await each
	// one's end; the approver approves two in three of those that wait
	// for it, asking again while toolgate refuses.
	var (
		mu         sync.Mutex // guards calls and every diskCall
		calls      []*diskCall
		next       atomic.Int64
		answered   atomic.Int64
		submitting atomic.Bool
		decideErrs []string // refusals of the approver's decisions other than storage_full
		decideFull atomic.Int64
	)
	submitting.Store(true)
	toDecide := make(chan *diskCall, 1000)
	var deciding sync.WaitGroup
	deciding.Go(func() {
		var each sync.WaitGroup
		defer each.Wait()
		for dc := range toDecide {
			each.Go(func() {
				d := wire.DecideRequest{PendingID: dc.pendingID, Approved: dc.kind == "approve", By: "approver", Reason: "disk test"}
				for ctx.Err() == nil {
					dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := approver.Decide(dctx, d)
					cancel()
					switch {
					case err == nil, errors.Is(err, machine.ErrConflict):
						return
					case errors.Is(err, wire.ErrStorageFull):
						decideFull.Add(1)
					default:
						mu.Lock()
						decideErrs = append(decideErrs, fmt.Sprintf("%s: %v", dc.pendingID, err))
						mu.Unlock()
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	})
	var agents sync.WaitGroup
	for a := range 4 {
		agent := newClusterAgent(t, nats, a)
		agents.Go(func() {
			for submitting.Load() {
				i := next.Add(1)
				dc := &diskCall{toolCallID: fmt.Sprintf("c%d", i), kind: "approve"}
				switch {
				case i%4 == 0:
					dc.kind = "auto"
				case i%3 == 0:
					dc.kind = "reject"
				}
				team := ""
				if dc.kind == "auto" {
					team = "auto"
				}
				mu.Lock()
				calls = append(calls, dc)
				mu.Unlock()
				actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				e, err := agent.Submit(actx, execCall(dc.toolCallID, team))
				if err != nil {
					cancel()
					mu.Lock()
					dc.submitErr = err
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				mu.Lock()
				dc.pendingID = e.PendingID
				mu.Unlock()
				if e.Status == machine.StatePendingApproval {
					toDecide <- dc
				}
				out, err := agent.Await(actx, e.PendingID, client.UntilFinished())
				cancel()
				var rejected *client.RejectedError
				var failed *client.ExecutionError
				mu.Lock()
				switch {
				case errors.As(err, &rejected):
					dc.answered, dc.answer = true, "rejected:"+string(rejected.Kind)
				case errors.As(err, &failed):
					dc.answered, dc.answer = true, "failed"
				case err != nil:
					dc.answerErr = err
				default:
					dc.answered, dc.answer = true, string(out.Kind)
				}
				mu.Unlock()
				answered.Add(1)
			}
		})
	}
	bustest.Eventually(t, 60*time.Second, 20*time.Millisecond, "20 calls answered before the fill", func() (bool, any) {
		n := answered.Load()
		return n >= 20, n
	})
	mark("%d calls answered; filling the store", answered.Load())

	// Fill the store, as whatever else shares the disk would: a stream
	// of its own in toolgate's account, written until JetStream refuses.
	filler, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_ = filler
	chunk := make([]byte, 256<<10)
	var fillErr error
	for i := 0; fillErr == nil && i < 1000; i++ {
		_, fillErr = js.Publish(ctx, "filler.x", chunk)
	}
	var apiErr *jetstream.APIError
	require.ErrorAs(t, fillErr, &apiErr, "the store never filled")
	require.Equal(t, jetstream.ErrorCode(10023), apiErr.ErrorCode, "the filler's refusal: %v", fillErr)
	full := time.Now()
	mark("the store is full: %v (%s)", fillErr, srv.jszStore())

	// While it is full: a submit, a decision and a report are refused,
	// quickly, saying why (asked at once).
	var asking sync.WaitGroup
	refused := func(what string, f func(context.Context) error) {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		from := time.Now()
		err := f(rctx)
		took := time.Since(from)
		mark("%s while full: %v (%s)", what, err, took.Round(time.Millisecond))
		if assert.ErrorIs(t, err, wire.ErrStorageFull, "%s while the store is full", what) {
			var api *wire.APIError
			if assert.ErrorAs(t, err, &api) {
				assert.Equal(t, "storage_full", api.Code)
				assert.Equal(t, 507, api.Status)
			}
			assert.Contains(t, err.Error(), "max_file_store", "%s: the refusal says how to make room", what)
		}
		assert.Less(t, took, storageRefusalWait, "%s while the store is full: answered late", what)
	}
	asking.Go(func() {
		refused("a submit", func(ctx context.Context) error {
			_, err := probe.Submit(ctx, execCall("refused-while-full", "auto"))
			return err
		})
	})
	asking.Go(func() {
		refused("a decision", func(ctx context.Context) error {
			_, err := approver.Decide(ctx, wire.DecideRequest{PendingID: held.PendingID, Approved: true, By: "approver"})
			return err
		})
	})
	asking.Go(func() {
		refused("an executor's report", func(ctx context.Context) error {
			_, err := executor.Succeed(ctx, manual.PendingID, "executor", json.RawMessage(`{"ok":true}`), 0)
			return err
		})
	})
	asking.Wait()
	// Nothing the refusals asked for is stored.
	for _, before := range []*machine.Entry{held, claimed} {
		e, err := probe.Get(ctx, before.PendingID)
		require.NoError(t, err)
		assert.Equal(t, before.Status, e.Status, before.PendingID)
		assert.Len(t, e.Transitions(), len(before.Transitions()), "%s: transitions", before.PendingID)
	}

	// Room again: the limit raised, as an operator would.
	srv.raiseMaxFileStore(t, nats.storeDir(), "1GB")
	roomy := time.Now()
	mark("max_file_store raised after %s full", roomy.Sub(full).Round(time.Millisecond))
	var recovered time.Duration
	waitFor(t, 30*time.Second, func() (bool, string) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := probe.Submit(pctx, execCall("refused-while-full", "auto"))
		recovered = time.Since(roomy)
		return err == nil, fmt.Sprint(err)
	}, "the refused submit is refused still after the limit was raised")
	mark("the refused submit went through %s after the limit was raised", recovered.Round(time.Millisecond))
	_, err = approver.Decide(ctx, wire.DecideRequest{PendingID: held.PendingID, Approved: true, By: "approver"})
	require.NoError(t, err)
	_, err = executor.Succeed(ctx, manual.PendingID, "executor", json.RawMessage(`{"ok":true}`), 0)
	require.NoError(t, err)

	// The load goes on a while, then stops; every agent gets its answer.
	at := answered.Load()
	bustest.Eventually(t, 60*time.Second, 20*time.Millisecond, "20 more calls answered after the limit was raised", func() (bool, any) {
		n := answered.Load()
		return n >= at+20, n
	})
	submitting.Store(false)
	agentsDone := make(chan struct{})
	go func() { agents.Wait(); close(agentsDone) }()
	select {
	case <-agentsDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("agents still waiting for answers 2 minutes after the load stopped")
	}
	close(toDecide)
	deciding.Wait()
	mark("every agent answered")
	_, err = probe.Await(ctx, held.PendingID, client.UntilFinished())
	require.NoError(t, err)

	if !poll(60*time.Second, func() bool { return len(unsettledCalls(t, js)) == 0 && bustest.Relayed(ctx, js) }) {
		t.Fatalf("not settled 60s after the load: unsettled %v; %s", unsettledCalls(t, js), relayState(t, js))
	}
	mark("settled and relayed")

	revs := callRevisions(t, js)
	events := allEventIDs(t, js)
	runs := readRuns(t, runsLog)
	final := map[string]*machine.Entry{}
	byToolCall := map[string]*machine.Entry{}
	for id, rs := range revs {
		final[id] = rs[len(rs)-1].entry
		byToolCall[final[id].ToolCallID] = final[id]
	}
	mu.Lock()
	defer mu.Unlock()
	var lost, unanswered, wrong, badRefusals, storedRefusals []string
	acked, refusedSubmits := 0, 0
	for _, dc := range calls {
		if dc.submitErr != nil {
			refusedSubmits++
			if !errors.Is(dc.submitErr, wire.ErrStorageFull) {
				badRefusals = append(badRefusals, fmt.Sprintf("%s: %v", dc.toolCallID, dc.submitErr))
			}
			if e := byToolCall[dc.toolCallID]; e != nil {
				storedRefusals = append(storedRefusals, fmt.Sprintf("%s: refused (%v), stored as %s", dc.toolCallID, dc.submitErr, e.PendingID))
			}
			continue
		}
		acked++
		e := final[dc.pendingID]
		switch {
		case e == nil:
			lost = append(lost, dc.pendingID+": acknowledged, no entry")
		case !e.Status.Terminal():
			lost = append(lost, fmt.Sprintf("%s: %s at the end", dc.pendingID, e.Status))
		case !dc.answered:
			unanswered = append(unanswered, fmt.Sprintf("%s: %v", dc.pendingID, dc.answerErr))
		case dc.answer != answerFor(e):
			wrong = append(wrong, fmt.Sprintf("%s: told %s, the entry is %s", dc.pendingID, dc.answer, e.Status))
		}
	}
	missingEvents, doubledEvents := eventGaps(revs, events)
	var reruns, afterReject []string
	runsOf := map[string]int{}
	for _, r := range runs {
		runsOf[r.toolCallID]++
	}
	for tc, n := range runsOf {
		e := byToolCall[tc]
		if n > 1 {
			reruns = append(reruns, fmt.Sprintf("%s: ran %d times", tc, n))
		}
		if e != nil && isRejected(e.Status) {
			afterReject = append(afterReject, fmt.Sprintf("%s: ran, ended %s", tc, e.Status))
		}
	}
	slices.Sort(reruns)
	slices.Sort(afterReject)
	var counts faultCounts
	counts.figure("calls submitted and acknowledged", acked)
	counts.figure("submits refused (the store full)", refusedSubmits)
	counts.figure("decisions refused (the store full), asked again", int(decideFull.Load()))
	counts.figure("tool runs", len(runs))
	counts.add("lost calls", true, lost)
	counts.add("refusals that are not storage_full", true, badRefusals)
	counts.add("decisions failed otherwise", true, decideErrs)
	counts.add("refused submits stored all the same", true, storedRefusals)
	counts.add("doubled transitions", true, doubledTransitions(revs))
	counts.add("missing events", true, missingEvents)
	counts.add("doubled events", true, doubledEvents)
	counts.add("tools run twice", true, reruns)
	counts.add("runs after reject", true, afterReject)
	counts.add("unanswered agents", true, unanswered)
	counts.add("answers that disagree with the entry", true, wrong)
	t.Logf("full for %s; a refused submit went through %s after the limit was raised; %s in all; counts:\n%s",
		roomy.Sub(full).Round(time.Millisecond), recovered.Round(time.Millisecond), time.Since(began).Round(time.Millisecond), counts.String())
	for _, r := range counts.rows {
		if r.must0 {
			assert.Zero(t, r.n, "%s: %v", r.name, r.examples)
		}
	}
	select {
	case <-proc.done:
		t.Errorf("toolgate serve exited:\n%s", grepLevels(proc.output()))
	default:
	}
	assert.NotContains(t, strings.ToLower(grepLevels(proc.output())), "panic")
}

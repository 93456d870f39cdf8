// Package python tests toolgate's Python package (sdk/python) and the
// Python examples built on it (approver.py, analytics.py) against a real
// toolgate: they read nothing of toolgate's Go, only the HTTP API and the
// event contract (docs/events.md), so the tests prove the contract is
// enough. The package is installed as a user installs it, with pip and
// no network, and type-checked with mypy --strict.
package python

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

const (
	bot1Token    = "python-example-bot1-token"
	bot2Token    = "python-example-bot2-token"
	analystToken = "python-example-analyst-token"
	tokens       = bot1Token + " bot1 approver\n" + bot2Token + " bot2 approver\n" + analystToken + " analyst viewer\n"

	rejectReason = "no money moves without a person"
)

// wait bounds each wait for a process or a call: generous, as a loaded CI
// machine can take seconds to start Python; a passing run takes far less.
const wait = 60 * time.Second

// TestPython_ApproverAndAnalyticsFollowTheContract runs two approvers and
// the analytics subscriber as real Python processes against a real
// toolgate, through a proxy that drops every connection between two
// rounds of calls. Each round submits a search (runs at once), an email
// (the approvers' rule approves it) and a transfer (rejected). It proves
// that the approvers' decisions land, once per call (the slower approver
// is told 409 and says who decided), that both approvers and the analytics
// resume after the last event they saw, and that the analytics' counts
// and times to decide are the calls' own.
func TestPython_ApproverAndAnalyticsFollowTheContract(t *testing.T) {
	t.Parallel()
	python := interpreter(t)

	// The README's policy: email and money ask a person, search runs at once.
	policy, err := os.ReadFile("policy.yaml")
	require.NoError(t, err)
	g := toolgatetest.Start(t, toolgatetest.Options{Tokens: tokens, Policy: string(policy)})
	proxy := startProxy(t, strings.TrimPrefix(g.HTTPURL, "http://"))
	ps := &processes{t: t, python: python, site: install(t, python)()}

	// An executor runs what may run; the agent waits for each call to end.
	_, ex := g.ConnectAs(t, "executor")
	x, err := ex.NewExecutor(client.ExecutorOptions{ID: "python-test"})
	require.NoError(t, err)
	for _, tool := range []string{"web_search", "send_email"} {
		x.Handle(tool, func(_ context.Context, c client.Call) (client.Result, error) {
			return client.Result{Output: json.RawMessage(`{"ok":true}`)}, nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	executorDone := make(chan error, 1)
	go func() { executorDone <- x.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-executorDone })
	_, agent := g.ConnectAs(t, "agent")

	const rounds, eventsPerRound = 2, 3 + 4 + 2 // search: scheduled, started, succeeded; email: + asked, approved; transfer: asked, rejected
	analytics := ps.start("analytics", analystToken, "analytics.py", "--url", proxy.url,
		"--max-events", fmt.Sprint(rounds*eventsPerRound), "--json")
	approvers := []*process{
		ps.start("approver bot1", bot1Token, "approver.py", "--url", proxy.url, "--approve", "web_*,send_*", "--reason", rejectReason, "--verbose"),
		ps.start("approver bot2", bot2Token, "approver.py", "--url", proxy.url, "--approve", "web_*", "--approve", "send_email", "--reason", rejectReason, "--verbose"),
	}
	// A token toolgate does not know stops an approver at once, saying so.
	impostor := ps.start("impostor", "python-example-wrong-token", "approver.py", "--url", proxy.url, "--approve", "*")
	all := append([]*process{analytics}, approvers...)
	for _, p := range all {
		ps.waitFor(p, "following the events", func(_, stderr []string) bool {
			return count(stderr, "/v1/events after event 0") == 1
		})
		if p != analytics {
			assert.Len(t, p.matching(false, "approver: deciding as "+p.user), 1, "%s knows who it is", p.name)
		}
	}

	ps.waitFor(impostor, "exit", func([]string, []string) bool { return impostor.exited })
	assert.Error(t, impostor.exitErr(), "an approver with a wrong token exits non-zero")
	assert.Len(t, impostor.matching(false, "401 unauthorized"), 1, ps.dump())
	assert.Empty(t, impostor.lines(true), "it decided nothing")

	var decided []*machine.Entry
	for round := range rounds {
		if round > 0 {
			// Every stream is cut between rounds; each process must pick
			// up after the last event it saw, no sooner and no later.
			require.GreaterOrEqual(t, proxy.cut(), len(all), "open connections when cut: the event streams at least")
			after := fmt.Sprintf("/v1/events after event %d", round*eventsPerRound)
			for _, p := range all {
				ps.waitFor(p, "resuming "+after, func(_, stderr []string) bool { return count(stderr, after) == 1 })
			}
		}
		entries := ps.runRound(ctx, agent, round)
		decided = append(decided, entries...)
		// The round's last event ends a call: the analytics has seen the
		// round when it has counted that many finished calls and events.
		finished := fmt.Sprintf("(%d calls finished, %d events)", 3*(round+1), eventsPerRound*(round+1))
		ps.waitFor(analytics, "analytics counting "+finished, func(_, stderr []string) bool { return count(stderr, finished) == 1 })
		// The approvers print nothing for most events: they say they
		// have read the round's last one when asked to be verbose.
		last := fmt.Sprintf("approver: event %d ", eventsPerRound*(round+1))
		for _, p := range approvers {
			ps.waitFor(p, "reading "+last, func(_, stderr []string) bool { return count(stderr, last) == 1 })
		}
	}

	// The analytics stops by itself after the events it was asked for.
	ps.waitExit(analytics)
	var summary struct {
		Events     int                       `json:"events"`
		Duplicates int                       `json:"duplicates"`
		Skipped    map[string]int            `json:"skipped"`
		LastID     string                    `json:"lastEventId"`
		ByType     map[string]int            `json:"byType"`
		Outcomes   map[string]map[string]int `json:"outcomes"`
		Decisions  map[string]struct {
			Count, Approved, Rejected int
			MinMs, MaxMs              int64
		} `json:"decisions"`
		DecidedBy map[string]int `json:"decidedBy"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.Join(analytics.lines(true), "\n")), &summary), ps.dump())
	assert.Equal(t, rounds*eventsPerRound, summary.Events)
	assert.Zero(t, summary.Duplicates)
	assert.Empty(t, summary.Skipped)
	assert.Equal(t, fmt.Sprint(rounds*eventsPerRound), summary.LastID, "the SSE id is the stream position")
	assert.Equal(t, map[string]int{
		"tool.scheduled_execution": rounds, "tool.approval_required": 2 * rounds,
		"tool.approval_granted": rounds, "tool.approval_rejected": rounds,
		"tool.execution_started": 2 * rounds, "tool.execution_succeeded": 2 * rounds,
	}, summary.ByType)
	assert.Equal(t, map[string]map[string]int{
		"web_search":     {"COMPLETED_SUCCESS": rounds},
		"send_email":     {"COMPLETED_SUCCESS": rounds},
		"transfer_funds": {"REJECTED_BY_USER": rounds},
	}, summary.Outcomes)

	// The times to decide and the deciders are the entries' own.
	by := map[string]int{}
	for _, tool := range []string{"send_email", "transfer_funds"} {
		var ms []int64
		for _, e := range decided {
			if e.ToolName == tool {
				ms = append(ms, e.DecisionTime-e.RequestedAt)
			}
		}
		require.Len(t, ms, rounds, tool)
		d := summary.Decisions[tool]
		assert.Equal(t, rounds, d.Count, tool)
		assert.Equal(t, slices.Min(ms), d.MinMs, tool)
		assert.Equal(t, slices.Max(ms), d.MaxMs, tool)
	}
	for _, e := range decided {
		by[e.ApprovedOrRejectedByUserID]++
	}
	assert.Equal(t, by, summary.DecidedBy)
	assert.Equal(t, rounds, summary.Decisions["send_email"].Approved)
	assert.Equal(t, rounds, summary.Decisions["transfer_funds"].Rejected)

	for _, p := range approvers {
		assert.Empty(t, p.matching(false, "failed"), "%s: no decision failed\n%s", p.name, ps.dump())
	}
}

// sdkPolicy is the policy sdk/python/tests/test_gate.py says it runs
// under: email, money and one tool nobody decides ask a person,
// delete_everything is denied, and one conversation's calls expire fast.
const sdkPolicy = `
default:
  requiresApprovalTools: [send_email, transfer_funds, wait_for_nobody]
  approvalTimeoutMs: 300000
  rules: {deny: [delete_everything]}
conversations:
  py-sdk-expiring: {approvalTimeoutMs: 1000}
`

const (
	sdkAgentToken    = "python-sdk-agent-token-0001"
	sdkApproverToken = "python-sdk-approver-token-01"
	sdkTokens        = sdkAgentToken + " py-agent agent\n" + sdkApproverToken + " py-approver approver\n"
)

// TestPython_SDKAgainstToolgate installs sdk/python with pip, as a user
// does, and runs its unittest tests against a real toolgate: the gate
// decorator's allowed, approved (with edited arguments), rejected, denied,
// withdrawn, expired and failing calls, the verdicts, and the typed
// errors. It then reads the calls the tests made and checks how each
// ended, from toolgate's side.
func TestPython_SDKAgainstToolgate(t *testing.T) {
	t.Parallel()
	python := interpreter(t)
	installed := install(t, python) // while toolgate starts
	g := toolgatetest.Start(t, toolgatetest.Options{Tokens: sdkTokens, Policy: sdkPolicy})
	site := installed()

	ctx, cancel := context.WithTimeout(t.Context(), 2*wait)
	defer cancel()
	tests, err := filepath.Abs("../../sdk/python/tests")
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-v", "-s", tests, "-t", tests)
	cmd.Dir = t.TempDir() // nothing of the source tree on sys.path: the installed package only
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1", "TOOLGATE_URL="+g.HTTPURL,
		"TOOLGATE_AGENT_TOKEN="+sdkAgentToken, "TOOLGATE_APPROVER_TOKEN="+sdkApproverToken)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest discover sdk/python/tests:\n%s", out)
	t.Logf("%s", out)

	// How each test's call ended, read from toolgate.
	for conv, want := range map[string]machine.State{
		"py-sdk-allow":     machine.StateCompletedSuccess,
		"py-sdk-edit":      machine.StateCompletedSuccess,
		"py-sdk-reject":    machine.StateRejectedByUser,
		"py-sdk-deny":      machine.StateRejectedByPolicy,
		"py-sdk-timeout":   machine.StateCancelled,
		"py-sdk-expiring":  machine.StateRejectedByTimeout,
		"py-sdk-fail":      machine.StateCompletedFailure,
		"py-sdk-retry":     machine.StateCompletedSuccess,
		"py-sdk-async":     machine.StateCompletedSuccess,
		"py-sdk-stop":      machine.StateCancelled,
		"py-sdk-interrupt": machine.StateRejectedByUser,
	} {
		var entries []*machine.Entry
		// The expiring call is rejected by toolgate's timer, at its
		// deadline: the test may have ended a moment before.
		bustest.Eventually(t, wait, 20*time.Millisecond, conv+" ends "+string(want), func() (bool, any) {
			entries, err = g.Client.List(ctx, wire.ListRequest{ConversationID: conv})
			require.NoError(t, err)
			return len(entries) == 1 && entries[0].Status == want, entries
		})
		e := entries[0]
		assert.Equal(t, "py-agent", e.CallerBotID, conv)
		switch conv {
		case "py-sdk-edit":
			assert.JSONEq(t, `{"to":"team@example.com","subject":"weekly report"}`, string(e.ToolArguments))
			assert.JSONEq(t, `{"to":"everyone@example.com","subject":"weekly"}`, string(e.OriginalArguments))
			assert.JSONEq(t, `"sent to team@example.com"`, string(e.Result))
			assert.Equal(t, "py-approver", e.ApprovedOrRejectedByUserID)
		case "py-sdk-reject":
			assert.Equal(t, "no money moves without a person", e.StatusReason)
		case "py-sdk-timeout":
			assert.Equal(t, "withdrawn: no decision within 0.5s", e.StatusReason)
		case "py-sdk-fail":
			assert.Equal(t, "ValueError: the search engine is down", e.Error)
		}
	}
}

// installed is where install put the package, once per test binary.
var installed = &struct {
	once    sync.Once
	started bool          // set by the first install, before it returns
	done    chan struct{} // closed once the install ended
	dir     string
	err     error
	out     []byte
}{done: make(chan struct{})}

// install starts installing sdk/python with python's pip into a directory
// of its own, as a user would (no network: the package's build backend is
// its own, and it depends on nothing), once per test binary. The function
// it returns waits for the install and returns the directory, for
// PYTHONPATH.
func install(t *testing.T, python string) func() string {
	installed.once.Do(func() {
		installed.started = true
		go func() {
			defer close(installed.done)
			installed.dir, installed.err = os.MkdirTemp("", "toolgate-python-")
			if installed.err != nil {
				return
			}
			cmd := exec.Command(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
				"--no-cache-dir", "--disable-pip-version-check", "--target", installed.dir, "../../sdk/python")
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PIP_ROOT_USER_ACTION=ignore")
			installed.out, installed.err = cmd.CombinedOutput()
		}()
	})
	return func() string {
		t.Helper()
		<-installed.done
		require.NoError(t, installed.err, "%s -m pip install --target DIR sdk/python (python3-pip; .ci/run installs it):\n%s", python, installed.out)
		return installed.dir
	}
}

// TestMain removes what install installed.
func TestMain(m *testing.M) {
	code := m.Run()
	if installed.started {
		<-installed.done
		if installed.dir != "" {
			_ = os.RemoveAll(installed.dir)
		}
	}
	os.Exit(code)
}

// interpreter is the python3 on PATH, resolved past a wrapper (pyenv's
// shims are shell scripts that take seconds to start on a busy machine).
// Its absence fails the test: CI installs it.
func interpreter(t *testing.T) string {
	path, err := exec.LookPath("python3")
	require.NoError(t, err, "the Python examples' test needs python3 (apt-get install -y python3; .ci/run installs it)")
	out, err := exec.Command(path, "-c", "import sys; print(sys.executable)").Output()
	require.NoError(t, err, "%s -c 'import sys; print(sys.executable)'", path)
	if exe := strings.TrimSpace(string(out)); exe != "" {
		return exe
	}
	return path
}

// runRound submits a round's three calls as the agent, waits for each to
// end, checks how, and returns the two the approvers decided.
func (ps *processes) runRound(ctx context.Context, agent *client.Client, round int) []*machine.Entry {
	t := ps.t
	type call struct{ tool, args string }
	calls := []call{
		{"web_search", `{"query":"toolgate"}`},
		{"send_email", `{"to":"team@example.com","subject":"weekly"}`},
		{"transfer_funds", `{"amount":250,"currency":"EUR"}`},
	}
	type result struct {
		out client.Outcome
		err error
	}
	results := make([]chan result, len(calls))
	for i, c := range calls {
		results[i] = make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			out, err := agent.Request(ctx, machine.Call{
				ToolCallID: fmt.Sprintf("%s-%d", c.tool, round), ToolName: c.tool,
				Arguments: json.RawMessage(c.args), ConversationID: "python-example",
			}, client.UntilFinished())
			results[i] <- result{out, err}
		}()
	}
	var decided []*machine.Entry
	for i, c := range calls {
		r := <-results[i]
		switch c.tool {
		case "transfer_funds":
			var rej *client.RejectedError
			require.ErrorAs(t, r.err, &rej, "%s\n%s", c.tool, ps.dump())
			assert.Equal(t, machine.StateRejectedByUser, rej.Entry.Status)
			assert.Equal(t, rejectReason, rej.Reason)
			assert.Contains(t, []string{"bot1", "bot2"}, rej.By)
			decided = append(decided, rej.Entry)
		default:
			require.NoError(t, r.err, "%s\n%s", c.tool, ps.dump())
			assert.Equal(t, client.Executed, r.out.Kind, c.tool)
			assert.Equal(t, machine.StateCompletedSuccess, r.out.Entry.Status)
			if c.tool == "send_email" {
				assert.Contains(t, []string{"bot1", "bot2"}, r.out.Entry.ApprovedOrRejectedByUserID)
				decided = append(decided, r.out.Entry)
			} else {
				assert.Empty(t, r.out.Entry.ApprovedOrRejectedByUserID, "a search asks nobody")
			}
		}
	}
	for _, e := range decided {
		// One approver decided; the other was refused (409) and said by whom.
		verb := map[machine.State]string{machine.StateCompletedSuccess: "approved", machine.StateRejectedByUser: "rejected"}[e.Status]
		first := ps.byUser(e.ApprovedOrRejectedByUserID)
		ps.waitFor(first, verb+" "+e.PendingID, func(stdout, _ []string) bool {
			return count(stdout, verb+" "+e.PendingID+" ("+e.ToolName+")") == 1
		})
		for _, p := range ps.approvers() {
			if p != first {
				refused := "already decided " + e.PendingID + " (" + e.ToolName + "): "
				ps.waitFor(p, refused+"… by "+e.ApprovedOrRejectedByUserID, func(stdout, _ []string) bool {
					for _, l := range stdout {
						if strings.Contains(l, refused) {
							return strings.HasSuffix(l, " by "+e.ApprovedOrRejectedByUserID)
						}
					}
					return false
				})
				assert.Equal(t, 1, count(p.lines(true), " "+e.PendingID+" "), "%s answers %s once", p.name, e.PendingID)
			}
		}
	}
	return decided
}

// processes are the Python processes a test runs; a failed wait prints
// what each of them said.
type processes struct {
	t      *testing.T
	python string
	site   string // where the toolgate package is installed
	mu     sync.Mutex
	all    []*process
}

// process is one Python example running, and what it has printed.
type process struct {
	name string
	user string
	mu   sync.Mutex
	out  []string // stdout, line by line
	err  []string // stderr
	// changed is closed (and replaced) whenever a line arrives or the
	// process ends.
	changed chan struct{}
	exited  bool
	waitErr error
}

// start runs python3 script with args, authenticated by token, until the
// test ends.
func (ps *processes) start(name, token, script string, args ...string) *process {
	t := ps.t
	cmd := exec.Command(ps.python, append([]string{script}, args...)...)
	// Nothing of the caller's environment chooses the server or the
	// token, and no bytecode lands in the source tree.
	cmd.Env = append(os.Environ(), "TOOLGATE_TOKEN="+token, "TOOLGATE_URL=", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+ps.site)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), name)
	user, _, _ := strings.Cut(strings.TrimPrefix(name, "approver "), " ")
	p := &process{name: name, user: user, changed: make(chan struct{})}
	var reading sync.WaitGroup
	for _, r := range []struct {
		from io.Reader
		to   *[]string
	}{{stdout, &p.out}, {stderr, &p.err}} {
		reading.Go(func() {
			sc := bufio.NewScanner(r.from)
			for sc.Scan() {
				p.update(func() { *r.to = append(*r.to, sc.Text()) })
			}
		})
	}
	done := make(chan struct{})
	go func() {
		reading.Wait() // Wait closes the pipes: read them to the end first
		err := cmd.Wait()
		p.update(func() { p.exited, p.waitErr = true, err })
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p
}

func (p *process) update(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
}

// lines is a copy of what the process printed on stdout (or stderr).
func (p *process) lines(stdout bool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if stdout {
		return append([]string(nil), p.out...)
	}
	return append([]string(nil), p.err...)
}

// matching is the lines of stdout (or stderr) that contain s.
func (p *process) matching(stdout bool, s string) []string {
	var m []string
	for _, l := range p.lines(stdout) {
		if strings.Contains(l, s) {
			m = append(m, l)
		}
	}
	return m
}

// waitFor waits until cond holds of what p printed, failing the test (and
// printing every process's output) if p ends or time runs out first.
func (ps *processes) waitFor(p *process, what string, cond func(stdout, stderr []string) bool) {
	ps.t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		ok, exited, changed := cond(p.out, p.err), p.exited, p.changed
		p.mu.Unlock()
		switch {
		case ok:
			return
		case exited:
			ps.t.Fatalf("%s ended before %s\n%s", p.name, what, ps.dump())
		}
		select {
		case <-changed:
		case <-deadline.C:
			ps.t.Fatalf("%s: no %s after %v\n%s", p.name, what, wait, ps.dump())
		}
	}
}

// waitExit waits until p ends, and requires it to succeed.
func (ps *processes) waitExit(p *process) {
	ps.t.Helper()
	ps.waitFor(p, "exit", func([]string, []string) bool { return p.exited })
	require.NoError(ps.t, p.exitErr(), "%s\n%s", p.name, ps.dump())
}

// exitErr is how p ended (nil while it runs, or if it succeeded).
func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

func (ps *processes) approvers() []*process {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var a []*process
	for _, p := range ps.all {
		if strings.HasPrefix(p.name, "approver ") {
			a = append(a, p)
		}
	}
	return a
}

// byUser is the approver deciding as user.
func (ps *processes) byUser(user string) *process {
	ps.t.Helper()
	for _, p := range ps.approvers() {
		if p.user == user {
			return p
		}
	}
	ps.t.Fatalf("no approver decides as %q\n%s", user, ps.dump())
	return nil
}

// dump is every process's output, for a failure's message.
func (ps *processes) dump() string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var b strings.Builder
	for _, p := range ps.all {
		fmt.Fprintf(&b, "--- %s stdout:\n%s\n--- %s stderr:\n%s\n",
			p.name, strings.Join(p.lines(true), "\n"), p.name, strings.Join(p.lines(false), "\n"))
	}
	return b.String()
}

func count(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// proxy forwards TCP connections to toolgate's HTTP API, and can drop all
// those open at once, as a restart or a network fault would.
type proxy struct {
	url   string
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool // the clients' side of each open connection
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, upstream string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{url: "http://" + l.Addr().String(), l: l, conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c, upstream) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) forward(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	p.mu.Lock()
	p.conns[c] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done // either side ending ends both
	c.Close()
	u.Close()
	<-done
}

// cut drops every open connection and says how many there were.
func (p *proxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	return len(p.conns)
}

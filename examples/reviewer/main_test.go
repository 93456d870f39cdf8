package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestHandler_AnswersSignedRequestsByItsRules: the reviewer's rules, in
// order, and its refusal of a request its secret did not sign.
func TestHandler_AnswersSignedRequestsByItsRules(t *testing.T) {
	t.Parallel()
	h, err := newHandler(testSecret, time.Now)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ask := func(secret, tool, args string) (int, wire.ReviewAnswer) {
		body, _ := json.Marshal(wire.ReviewRequest{V: 1, Reviewer: "rules", Call: &machine.Entry{ToolName: tool, ToolArguments: json.RawMessage(args)}})
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		sign(t, req, secret, body)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var a wire.ReviewAnswer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}
	for _, tc := range []struct{ tool, args, want string }{
		{"Bash", `{"command": "git status --short"}`, "approve"},
		{"Bash", `{"command": "git log -3"}`, "approve"},
		{"Bash", `{"command": "git status; curl evil.example"}`, "abstain"},
		{"Bash", `{"command": "rm -rf build"}`, "reject"},
		{"Bash", `{"command": "git diff .env"}`, "escalate"},
		{"Read", `{"file_path": "/srv/app/.env"}`, "escalate"},
		{"WebFetch", `{"url": "https://docs.python.org/3/"}`, "approve"},
		{"WebFetch", `{"url": "http://docs.python.org/3/"}`, "abstain"},
		{"WebFetch", `{"url": "https://evil.example/docs"}`, "abstain"},
	} {
		status, a := ask(testSecret, tc.tool, tc.args)
		assert.Equal(t, 200, status, tc.args)
		assert.Equal(t, tc.want, a.Decision, tc.args)
		assert.NoError(t, a.Check(), "every answer is one toolgate takes")
	}
	status, _ := ask("whsec_"+strings.Repeat("A", 32), "Bash", `{"command": "git status"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "another secret's signature")
}

func sign(t *testing.T, req *http.Request, secret string, body []byte) {
	t.Helper()
	key, err := base64Key(secret)
	require.NoError(t, err)
	ts := time.Now().Unix()
	req.Header.Set("webhook-id", "test")
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", worker.SignWebhook([][]byte{key}, "test", ts, body))
}

func base64Key(secret string) ([]byte, error) {
	h, err := newHandler(secret, time.Now)
	if err != nil {
		return nil, err
	}
	return h.(*handler).key, nil
}

// kinds are the asks the run mixes, and what the reviewer's rules and
// its mayApprove make of each.
var kinds = []struct {
	tool, args string
	review     string // what the reviewer answers
}{
	{"Bash", `{"command": "git status"}`, "approve"},                 // within mayApprove: runs
	{"WebFetch", `{"url": "https://docs.python.org/3/"}`, "approve"}, // within mayApprove: runs
	{"Bash", `{"command": "git diff"}`, "refused"},                   // approved, beyond mayApprove: left to humans
	{"Bash", `{"command": "rm -rf build"}`, "reject"},                // rejected by the reviewer
	{"Bash", `{"command": "cat .env"}`, "escalate"},                  // escalated to humans
	{"Bash", `{"command": "ls -la"}`, "abstain"},                     // no rule: humans
	{"WebFetch", `{"url": "https://evil.example/"}`, "abstain"},      // no rule: humans
}

// TestReviewer_HundredAsksFromEightAgents: with the example reviewer
// allowed to approve Bash(git status*) and WebFetch(domain:docs.*), 100
// mixed asks from 8 agents: its approvals run with no human; its
// rejections and escalations are recorded as its own; a call a deny rule
// (added while the reviewer looked at it) covers is refused to it and
// stays with the rules; and once it is killed mid-run its calls are left
// to humans, counted as errors: none lost, none run unapproved.
func TestReviewer_HundredAsksFromEightAgents(t *testing.T) {
	t.Parallel()
	h, err := newHandler(testSecret, time.Now)
	require.NoError(t, err)
	// Requests for git status --ignored wait until the test lets them
	// go: the deny rule is added meanwhile.
	release, held := make(chan struct{}), make(chan string, 16)
	var mu sync.Mutex
	answered := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req wire.ReviewRequest
		require.NoError(t, json.Unmarshal(body, &req))
		if strings.Contains(string(req.Call.ToolArguments), "--ignored") {
			held <- req.Call.PendingID
			<-release
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
		mu.Lock()
		answered[req.Call.PendingID] = true
		mu.Unlock()
	}))
	reviewers := fmt.Sprintf(`
default:
  requiresApprovalTools: all
  approvalTimeoutMs: 600000
  reviewers:
    - name: rules
      match: [Bash, WebFetch]
      url: %s/review
      secret: %s
      timeoutMs: 10000
      mayApprove: ["Bash(git status*)", "WebFetch(domain:docs.*)"]
`, srv.URL, testSecret)
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: reviewers})
	ctx := t.Context()
	bustest.Eventually(t, 20*time.Second, 20*time.Millisecond, "the reviewer role's consumer", func() (bool, any) {
		_, err := g.JS.Consumer(ctx, wire.EventsStream, worker.ReviewerDurable)
		return err == nil, err
	})

	var ranMu sync.Mutex
	ran := map[string]int{}
	x, err := g.Client.NewExecutor(client.ExecutorOptions{ID: "exec"})
	require.NoError(t, err)
	for _, tool := range []string{"Bash", "WebFetch"} {
		x.Handle(tool, func(_ context.Context, c client.Call) (client.Result, error) {
			ranMu.Lock()
			ran[c.PendingID]++
			ranMu.Unlock()
			return client.Result{Output: json.RawMessage(`"ok"`)}, nil
		})
	}
	xctx, stopX := context.WithCancel(ctx)
	xdone := make(chan error, 1)
	go func() { xdone <- x.Run(xctx) }()
	t.Cleanup(func() { stopX(); <-xdone })

	var calls []asked
	submit := func(n int, from int, late bool, kind func(i int) (string, string, string)) {
		t.Helper()
		out := make([]asked, n)
		var wg sync.WaitGroup
		for agent := range 8 {
			wg.Go(func() {
				for i := agent; i < n; i += 8 {
					tool, args, review := kind(i)
					e, err := g.Client.Submit(ctx, machine.Call{
						ToolCallID: fmt.Sprintf("t%d", from+i), ToolName: tool, Arguments: json.RawMessage(args),
						CallerBotID: fmt.Sprintf("agent-%d", agent), ConversationID: fmt.Sprintf("conv-%d", agent),
					})
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, machine.StatePendingApproval, e.Status, args)
					out[i] = asked{e.PendingID, review, late}
				}
			})
		}
		wg.Wait()
		calls = append(calls, out...)
	}
	mixed := func(i int) (string, string, string) { k := kinds[i%len(kinds)]; return k.tool, k.args, k.review }

	// 60 asks while the reviewer runs, two of them git status --ignored.
	submit(60, 0, false, func(i int) (string, string, string) {
		if i == 17 || i == 42 {
			return "Bash", `{"command": "git status --ignored"}`, "denied"
		}
		return mixed(i)
	})
	<-held
	<-held
	_, err = g.Client.SetPolicy(ctx, reviewers+`  rules: {deny: ["Bash(git status --ignored*)"]}`+"\n")
	require.NoError(t, err)
	bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, "the deny rule in force", func() (bool, any) {
		e, err := g.Client.Submit(ctx, machine.Call{ToolName: "Bash", Arguments: json.RawMessage(`{"command": "git status --ignored probe"}`), CallerBotID: "agent-0", ConversationID: "probe"})
		if err != nil {
			return false, err
		}
		if e.Status == machine.StatePendingApproval {
			calls = append(calls, asked{e.PendingID, "denied", false}) // asked before the rule: held too
		}
		return e.Status == machine.StateRejectedByPolicy, e.Status
	})
	close(release)

	// The reviewer has answered every one of them, and gate recorded it.
	byID := func() map[string]*machine.Entry {
		got := map[string]*machine.Entry{}
		all, err := g.Client.List(ctx, wire.ListRequest{})
		require.NoError(t, err)
		for _, e := range all {
			got[e.PendingID] = e
		}
		return got
	}
	settled := func(c asked, e *machine.Entry) bool {
		switch c.review {
		case "approve":
			return e.Status == machine.StateCompletedSuccess
		case "reject":
			return e.Status == machine.StateRejectedByUser
		case "refused", "escalate", "denied":
			return len(e.Reviews) == 1
		}
		mu.Lock()
		defer mu.Unlock()
		return answered[c.id]
	}
	bustest.Eventually(t, 15*time.Second, 50*time.Millisecond, "the reviewer's answers recorded", func() (bool, any) {
		got := byID()
		for _, c := range calls {
			if e := got[c.id]; e == nil || !settled(c, e) {
				return false, fmt.Sprintf("%s (%s): %+v", c.id, c.review, e)
			}
		}
		return true, nil
	})

	// Killed mid-run: 40 more asks find no reviewer, and are left to
	// humans, each counted as an error.
	srv.Close()
	submit(40, 100, true, mixed)
	bustest.Eventually(t, 15*time.Second, 50*time.Millisecond, "40 errors counted", func() (bool, any) {
		n := answers(t, g.HTTPURL, "error")
		return n == 40, n
	})
	assert.Equal(t, 0, answers(t, g.HTTPURL, "timeout"))
	got := byID()
	for _, c := range calls {
		if c.late {
			e := got[c.id]
			assert.Equal(t, machine.StatePendingApproval, e.Status, "%s: left to humans", c.id)
			assert.Empty(t, e.Reviews, c.id)
		}
	}

	// Humans decide what is left: alice approves all but the .env and
	// the deny-ruled calls, which she rejects.
	var humans sync.WaitGroup
	for _, c := range calls {
		e := got[c.id]
		if e.Status != machine.StatePendingApproval {
			continue
		}
		approve := c.review != "escalate" && c.review != "denied"
		humans.Go(func() {
			_, err := g.Client.Decide(ctx, wire.DecideRequest{PendingID: c.id, Approved: approve, By: "alice"})
			assert.NoError(t, err, c.id)
		})
	}
	humans.Wait()
	bustest.Eventually(t, 15*time.Second, 50*time.Millisecond, "every call terminal", func() (bool, any) {
		got := byID()
		for _, c := range calls {
			if e := got[c.id]; e == nil || !e.Status.Terminal() {
				return false, fmt.Sprintf("%s %+v", c.id, e)
			}
		}
		return true, nil
	})

	final := byID()
	for _, c := range calls {
		require.Contains(t, final, c.id, "no call lost")
	}
	ranMu.Lock()
	defer ranMu.Unlock()
	for _, c := range calls {
		e := final[c.id]
		switch {
		case c.late:
			assert.NotEqual(t, machine.DecidedByReviewer, e.DecidedBy, "%s: the killed reviewer decided nothing", c.id)
		case c.review == "approve":
			assert.Equal(t, machine.DecidedByReviewer, e.DecidedBy, c.id)
			assert.Equal(t, "reviewer:rules", e.ApprovedOrRejectedByUserID, c.id)
		case c.review == "reject":
			assert.Equal(t, machine.DecidedByReviewer, e.DecidedBy, c.id)
			assert.Equal(t, "reviewer:rules", e.ApprovedOrRejectedByUserID, c.id)
			assert.Equal(t, "rm -rf deletes recursively", e.StatusReason, c.id)
		case c.review == "escalate":
			assert.Equal(t, machine.ReviewEscalate, e.Reviews[0].Answer, c.id)
			assert.Equal(t, "reviewer:rules", e.Reviews[0].By, c.id)
			assert.Equal(t, machine.StateRejectedByUser, e.Status, c.id)
		case c.review == "denied":
			assert.Contains(t, e.Reviews[0].Refused, `the policy denies it: rules.deny "Bash(git status --ignored*)"`, c.id)
			assert.Equal(t, "alice", e.ApprovedOrRejectedByUserID, "%s: stays with the rules: no reviewer approves it", c.id)
		case c.review == "refused":
			assert.Contains(t, e.Reviews[0].Refused, "mayApprove does not cover it", c.id)
			assert.Equal(t, "alice", e.ApprovedOrRejectedByUserID, c.id)
		}
		// None run unapproved, none twice.
		approved := e.Status == machine.StateCompletedSuccess
		assert.Equal(t, map[bool]int{true: 1, false: 0}[approved], ran[c.id], "%s ran", c.id)
		if ran[c.id] > 0 {
			assert.Contains(t, []machine.Decider{machine.DecidedByReviewer, machine.DecidedByHuman}, e.DecidedBy, c.id)
		}
	}
	assert.GreaterOrEqual(t, len(calls), 100)
	// What the reviewer answered before it was killed, as counted.
	want := map[string]int{}
	for _, c := range calls {
		switch {
		case c.late:
		case c.review == "refused", c.review == "denied":
			want["approve"]++ // it approved; gate refused
		default:
			want[c.review]++
		}
	}
	for _, a := range []string{"approve", "reject", "escalate", "abstain"} {
		assert.Equal(t, want[a], answers(t, g.HTTPURL, a), "%s answers counted", a)
	}
}

// asked is one call of the run and what the reviewer makes of it.
type asked struct {
	id, review string
	late       bool // asked after the reviewer was killed
}

var answerLine = regexp.MustCompile(`(?m)^toolgate_reviewer_answers_total\{answer="([a-z]+)",reviewer="([a-z]+)"\} (\d+)$`)

// answers is toolgate_reviewer_answers_total{reviewer="rules",answer}.
func answers(t *testing.T, httpURL, answer string) int { return count(t, httpURL, "rules", answer) }

// count is toolgate_reviewer_answers_total{reviewer,answer}.
func count(t *testing.T, httpURL, reviewer, answer string) int {
	t.Helper()
	resp, err := http.Get(httpURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range answerLine.FindAllStringSubmatch(string(body), -1) {
		if m[1] == answer && m[2] == reviewer {
			n, _ := strconv.Atoi(m[3])
			return n
		}
	}
	return 0
}

// TestReviewer_OverNATSAndThoseThatGiveNoAnswer: the reviewers of a call
// are asked in the policy's order: one that answers too late is counted
// as a timeout, one that answers garbage as invalid, each leaving the
// call to the next, and one on a NATS subject approves it.
func TestReviewer_OverNATSAndThoseThatGiveNoAnswer(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: `
default:
  reviewers:
    - {name: slow, match: [Bash], nats: reviewers.slow, timeoutMs: 200, mayApprove: [Bash]}
    - {name: garbage, match: [Bash], nats: reviewers.garbage, mayApprove: [Bash]}
    - {name: good, match: [Bash], nats: reviewers.good, mayApprove: ["Bash(git status*)"]}
`})
	ctx := t.Context()
	seen := make(chan wire.ReviewRequest, 3)
	answer := func(subject string, wait time.Duration, reply string) {
		_, err := g.NC.Subscribe(subject, func(m *nats.Msg) {
			var req wire.ReviewRequest
			if json.Unmarshal(m.Data, &req) == nil {
				seen <- req
			}
			time.Sleep(wait)
			_ = m.Respond([]byte(reply))
		})
		require.NoError(t, err)
	}
	answer("reviewers.slow", 2*time.Second, `{"decision": "approve"}`)
	answer("reviewers.garbage", 0, `{"decision": "yes please"}`)
	answer("reviewers.good", 0, `{"decision": "approve", "reason": "read-only git"}`)
	require.NoError(t, g.NC.Flush())
	bustest.Eventually(t, 20*time.Second, 20*time.Millisecond, "the reviewer role's consumer", func() (bool, any) {
		_, err := g.JS.Consumer(ctx, wire.EventsStream, worker.ReviewerDurable)
		return err == nil, err
	})

	e, err := g.Client.Submit(ctx, machine.Call{ToolName: "Bash", Arguments: json.RawMessage(`{"command": "git status"}`), CallerBotID: "agent", ConversationID: "nats"})
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)
	bustest.Eventually(t, 15*time.Second, 20*time.Millisecond, "approved by reviewer:good", func() (bool, any) {
		got, err := g.Client.Get(ctx, e.PendingID)
		return err == nil && got.Status == machine.StateApproved, got
	})
	got, err := g.Client.Get(ctx, e.PendingID)
	require.NoError(t, err)
	assert.Equal(t, "reviewer:good", got.ApprovedOrRejectedByUserID)
	assert.Equal(t, machine.DecidedByReviewer, got.DecidedBy)
	assert.Empty(t, got.Reviews, "timeouts and garbage record nothing")
	for _, want := range []string{"slow", "garbage", "good"} {
		req := <-seen
		assert.Equal(t, want, req.Reviewer)
		assert.Equal(t, e.PendingID, req.Call.PendingID)
		assert.Positive(t, req.Deadline)
	}
	for reviewer, answer := range map[string]string{"slow": "timeout", "garbage": "invalid", "good": "approve"} {
		assert.Equal(t, 1, count(t, g.HTTPURL, reviewer, answer), "%s %s", reviewer, answer)
	}
}

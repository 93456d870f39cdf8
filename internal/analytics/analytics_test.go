package analytics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// plannedCall is one call of a scripted run and everything that will
// happen to it, decided up front so that the test knows the answers.
type plannedCall struct {
	id, tool, team string
	requested      time.Time
	decision       string // "approve", "reject", "timeout", "" (not asked)
	approver       string
	reason         string
	decideAfter    time.Duration
	execute, fail  bool
	cost           float64
}

var approvers = []string{"alice", "bob", "carol"}

// planCalls makes n calls from t0 on, 15s apart: web_search always
// approved, deploy mostly rejected, send_email often timing out, read_file
// run without asking, rm_rf denied.
func planCalls(n int, t0 time.Time, seed uint64) []plannedCall {
	rng := rand.New(rand.NewPCG(seed, 7))
	reasons := []string{"too risky", "too risky", "too risky", "wrong branch", "wrong branch", "not now", ""}
	calls := make([]plannedCall, n)
	for i := range calls {
		c := plannedCall{id: fmt.Sprintf("call-%d", i), requested: t0.Add(time.Duration(i) * 15 * time.Second)}
		switch i % 10 {
		case 0, 1, 2:
			c.tool, c.team, c.decision = "web_search", "research", "approve"
			c.approver = approvers[rng.IntN(3)]
			c.decideAfter = time.Duration(1000+rng.IntN(120_000)) * time.Millisecond
			c.execute, c.cost = true, 0.25
		case 3, 4:
			c.tool, c.team = "deploy", []string{"ops", "research"}[i%2]
			c.approver = approvers[rng.IntN(2)]
			c.decideAfter = time.Duration(30_000+rng.IntN(269_000)) * time.Millisecond // before the 5-minute deadline
			if rng.IntN(10) < 7 {
				c.decision, c.reason = "reject", reasons[rng.IntN(len(reasons))]
			} else {
				c.decision, c.execute, c.fail, c.cost = "approve", true, rng.IntN(2) == 0, 1.5
			}
		case 5, 6:
			c.tool, c.team = "send_email", "ops"
			if rng.IntN(10) < 4 {
				c.decision = "timeout"
				c.decideAfter = 5*time.Minute + time.Second
			} else {
				c.decision, c.approver, c.execute = "approve", "carol", true
				c.decideAfter = time.Duration(5000+rng.IntN(195_000)) * time.Millisecond
			}
		case 7, 8:
			c.tool, c.team, c.execute = "read_file", "research", true
		case 9:
			c.tool, c.team = "rm_rf", "research"
		}
		calls[i] = c
	}
	return calls
}

var timeoutEvaluator = machine.EvaluatorFunc(func(ctx context.Context, c machine.Call) (machine.Verdict, error) {
	v, err := evaluator.Evaluate(ctx, c)
	v.AutoRejectOnTimeout = true
	return v, err
})

// runCalls carries out the plan, concurrently, each call on a Machine
// whose clock says when each step happens.
func runCalls(t *testing.T, store machine.Store, calls []plannedCall) {
	t.Helper()
	runCallsRetrying(t, store, calls, 1)
}

// runCallsRetrying tries each step up to tries times while it fails with
// ErrNotFound or ErrConflict. On a cluster, bus.KVStore's reads are
// direct gets any replica answers, so a step may read the entry as it was
// before the previous step (or not at all) and be refused; such a refusal
// writes nothing, so trying again is safe. (That stale read is a bus
// matter, reported with this package.)
func runCallsRetrying(t *testing.T, store machine.Store, calls []plannedCall, tries int) {
	t.Helper()
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(16)
	retry := func(step func() error) error {
		for i := 1; ; i++ {
			err := step()
			if i >= tries || !(errors.Is(err, machine.ErrNotFound) || errors.Is(err, machine.ErrConflict)) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, c := range calls {
		g.Go(func() error {
			clk := toolgatetest.FixedClock(c.requested)
			m := machine.New(store, machine.WithClock(clk.Now), machine.WithEvaluator(timeoutEvaluator))
			e, err := m.Submit(ctx, machine.Call{ToolCallID: c.id, ToolName: c.tool, Team: c.team, CallerBotID: "agent", ConversationID: "conv-" + c.team})
			if err != nil {
				return err
			}
			decided := c.requested.Add(c.decideAfter)
			clk.Set(decided)
			err = retry(func() error {
				var err error
				switch c.decision {
				case "approve", "reject":
					_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: c.decision == "approve", By: c.approver, Reason: c.reason})
				case "timeout":
					_, err = m.Expire(ctx, e.PendingID)
				}
				return err
			})
			if err != nil || !c.execute {
				return err
			}
			clk.Set(decided.Add(time.Second))
			if err := retry(func() error {
				_, err := m.Claim(ctx, e.PendingID, "exec", time.Minute)
				return err
			}); err != nil {
				return err
			}
			clk.Set(decided.Add(3 * time.Second))
			o := machine.Outcome{Holder: "exec", Cost: c.cost}
			return retry(func() error {
				var err error
				if c.fail {
					o.Error = "failed"
					_, err = m.Fail(ctx, e.PendingID, o)
				} else {
					_, err = m.Complete(ctx, e.PendingID, o)
				}
				return err
			})
		})
	}
	require.NoError(t, g.Wait())
}

// expected computes, from the plan alone, what the analytics must say.
type expected struct {
	tools, teams map[string]*wire.ToolReport
	decide       map[string][]int64 // per tool and per team (keys "tool:x", "team:x"), for quantiles
	approvers    map[string]*wire.ApproverReport
	response     map[string][]int64
	reasons      map[string]map[string]int64
	hours        map[int64]*wire.SeriesPoint
}

func expect(calls []plannedCall) *expected {
	x := &expected{tools: map[string]*wire.ToolReport{}, teams: map[string]*wire.ToolReport{},
		decide: map[string][]int64{}, approvers: map[string]*wire.ApproverReport{}, response: map[string][]int64{},
		reasons: map[string]map[string]int64{}, hours: map[int64]*wire.SeriesPoint{}}
	hour := func(t time.Time) *wire.SeriesPoint {
		h := t.UTC().Truncate(time.Hour).UnixMilli()
		if x.hours[h] == nil {
			x.hours[h] = &wire.SeriesPoint{T: h}
		}
		return x.hours[h]
	}
	for _, c := range calls {
		for _, k := range []struct {
			m    map[string]*wire.ToolReport
			name string
			key  string
		}{{x.tools, c.tool, "tool:" + c.tool}, {x.teams, c.team, "team:" + c.team}} {
			r := k.m[k.name]
			if r == nil {
				r = &wire.ToolReport{Name: k.name}
				k.m[k.name] = r
			}
			r.Calls++
			ms := c.decideAfter.Milliseconds()
			if r.DecidedBy == nil {
				r.DecidedBy = map[machine.Decider]int64{}
			}
			r.DecidedBy[machine.DecidedByPolicy]++ // the policy's verdict at submit
			switch c.decision {
			case "approve", "reject":
				r.DecidedBy[machine.DecidedByHuman]++
			case "timeout":
				r.DecidedBy[machine.DecidedByTimeout]++
			}
			switch {
			case c.tool == "read_file":
				r.RanUnasked++
			case c.tool == "rm_rf":
				r.PolicyDenied++
			default:
				r.Asked++
				r.ApprovalTimeoutMs = (5 * time.Minute).Milliseconds()
				r.LastAskedAt = max(r.LastAskedAt, c.requested.UnixMilli())
			}
			switch c.decision {
			case "approve":
				r.Approved++
				x.decide[k.key] = append(x.decide[k.key], ms)
			case "reject":
				r.Rejected++
				x.decide[k.key] = append(x.decide[k.key], ms)
				if x.reasons[k.key] == nil {
					x.reasons[k.key] = map[string]int64{}
				}
				reason := c.reason
				if reason == "" {
					reason = "(no reason given)"
				}
				x.reasons[k.key][reason]++
			case "timeout":
				r.TimedOut++
			}
			if c.execute {
				r.Attempts++
				if c.fail {
					r.Failed++
				} else {
					r.Succeeded++
				}
				r.Cost += c.cost
			}
			if k.m[k.name] == x.tools[c.tool] {
				r.Teams = addCount(r.Teams, c.team)
			}
		}
		p := hour(c.requested)
		p.Calls++
		if c.decision != "" {
			p.Asked++
		}
		decided := c.requested.Add(c.decideAfter)
		switch c.decision {
		case "approve", "reject":
			p := hour(decided)
			p.Decisions++
			if c.decision == "approve" {
				p.Approved++
			} else {
				p.Rejected++
			}
			x.response["hour:"+fmt.Sprint(p.T)] = append(x.response["hour:"+fmt.Sprint(p.T)], c.decideAfter.Milliseconds())
			a := x.approvers[c.approver]
			if a == nil {
				a = &wire.ApproverReport{Name: c.approver}
				x.approvers[c.approver] = a
			}
			a.Decisions++
			if c.decision == "approve" {
				a.Approved++
			} else {
				a.Rejected++
				a.MostRejectedTools = addCount(a.MostRejectedTools, c.tool)
			}
			x.response[c.approver] = append(x.response[c.approver], c.decideAfter.Milliseconds())
		case "timeout":
			hour(decided).TimedOut++
		}
	}
	for _, m := range []map[string]*wire.ToolReport{x.tools, x.teams} {
		for _, r := range m {
			r.Decided = r.Approved + r.Rejected + r.TimedOut
			r.ApprovalRate = ratio(r.Approved, r.Decided)
			r.RejectionRate = ratio(r.Rejected, r.Decided)
			r.TimeoutRate = ratio(r.TimedOut, r.Asked)
		}
	}
	for _, a := range x.approvers {
		a.ApprovalRate = ratio(a.Approved, a.Decisions)
	}
	return x
}

func addCount(l []wire.NameCount, name string) []wire.NameCount {
	for i := range l {
		if l[i].Name == name {
			l[i].Count++
			return l
		}
	}
	return append(l, wire.NameCount{Name: name, Count: 1})
}

func ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// checkDurations checks a summary against the exact values: count and
// mean exactly, p50 and p90 within the histogram's 5%. It returns the
// summary with the estimates replaced by the exact quantiles, so that the
// rest of a report can be compared whole.
func checkDurations(t *testing.T, what string, values []int64, got wire.DurationSummary) wire.DurationSummary {
	t.Helper()
	want := wire.DurationSummary{Count: int64(len(values))}
	if len(values) == 0 {
		assert.Equal(t, want, got, what)
		return got
	}
	v := slices.Sorted(slices.Values(values))
	var sum int64
	for _, x := range v {
		sum += x
	}
	want.MeanMs = math.Round(float64(sum) / float64(len(v)))
	q := func(p float64) float64 { return float64(v[int(math.Ceil(p*float64(len(v))))-1]) }
	want.P50Ms, want.P90Ms = q(0.5), q(0.9)
	assert.Equal(t, want.Count, got.Count, "%s count", what)
	assert.Equal(t, want.MeanMs, got.MeanMs, "%s mean", what)
	assert.InEpsilon(t, want.P50Ms, got.P50Ms, 0.05, "%s p50", what)
	assert.InEpsilon(t, want.P90Ms, got.P90Ms, 0.05, "%s p90", what)
	return want
}

// checkReport compares a report with what the plan says it must be.
func checkReport(t *testing.T, x *expected, r *wire.AnalyticsReport) {
	t.Helper()
	assert.Zero(t, r.Lag)
	check := func(kind string, want map[string]*wire.ToolReport, got []wire.ToolReport) {
		t.Helper()
		require.Len(t, got, len(want), kind)
		for _, g := range got {
			w := want[g.Name]
			require.NotNil(t, w, "%s %q", kind, g.Name)
			g.TimeToDecide = checkDurations(t, kind+" "+g.Name, x.decide[kind+":"+g.Name], g.TimeToDecide)
			w.TimeToDecide = g.TimeToDecide
			w.TopRejectionReasons = topOf(x.reasons[kind+":"+g.Name])
			if kind == "team" {
				w.Teams = nil
			} else {
				w.Teams = topOf(countsOf(w.Teams))
			}
			assert.Equal(t, *w, g, "%s %s", kind, g.Name)
		}
	}
	check("tool", x.tools, r.Tools)
	check("team", x.teams, r.Teams)

	require.Len(t, r.Approvers, len(x.approvers))
	for _, g := range r.Approvers {
		w := x.approvers[g.Name]
		require.NotNil(t, w, g.Name)
		g.ResponseTime = checkDurations(t, "approver "+g.Name, x.response[g.Name], g.ResponseTime)
		w.ResponseTime = g.ResponseTime
		w.MostRejectedTools = topOf(countsOf(w.MostRejectedTools))
		assert.Equal(t, *w, g, "approver %s", g.Name)
	}

	var calls int64
	for _, tr := range x.tools {
		calls += tr.Calls
	}
	assert.Equal(t, calls, r.Totals.Calls)

	require.NotEmpty(t, r.Series.Points)
	var seen int
	for _, p := range r.Series.Points {
		w := x.hours[p.T]
		if w == nil {
			assert.Equal(t, wire.SeriesPoint{T: p.T}, p, "an hour with nothing")
			continue
		}
		seen++
		resp := x.response["hour:"+fmt.Sprint(p.T)]
		if len(resp) > 0 {
			d := checkDurations(t, "hour "+fmt.Sprint(p.T), resp, wire.DurationSummary{
				Count: p.Decisions, MeanMs: p.MeanResponseMs, P50Ms: p.P50ResponseMs, P90Ms: p.P90ResponseMs})
			w.MeanResponseMs, p.P50ResponseMs, p.P90ResponseMs = d.MeanMs, 0, 0
		}
		assert.Equal(t, *w, p, "hour %s", time.UnixMilli(p.T).UTC())
	}
	assert.Equal(t, len(x.hours), seen, "every hour of the run is in the series")
}

func countsOf(l []wire.NameCount) map[string]int64 {
	m := map[string]int64{}
	for _, nc := range l {
		m[nc.Name] += nc.Count
	}
	return m
}

// topOf sorts counts as reports do: most first, ties by name; five at most
// for reasons and tools.
func topOf(m map[string]int64) []wire.NameCount {
	var l []wire.NameCount
	for k, v := range m {
		l = append(l, wire.NameCount{Name: k, Count: v})
	}
	slices.SortFunc(l, func(a, b wire.NameCount) int {
		if a.Count != b.Count {
			return int(b.Count - a.Count)
		}
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return l[:min(len(l), 5)]
}

// runAnalytics runs an Analytics until the test ends (or it crashes), on a
// connection of its own, like a process of its own.
func runAnalytics(t *testing.T, env *bustest.Env, configure func(*analytics.Analytics)) (*analytics.Analytics, <-chan error) {
	t.Helper()
	_, js := bustest.Connect(t, env.URLs)
	a, err := analytics.Open(t.Context(), bus.NewConn(js), analytics.Config{Replicas: len(env.Servers), BatchSize: 64, Log: bustest.Logger()})
	require.NoError(t, err)
	if configure != nil {
		configure(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	out := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		out <- <-done
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return a, out
}

// waitCaughtUp waits until the analytics have taken in every event.
func waitCaughtUp(t *testing.T, env *bustest.Env, a *analytics.Analytics) {
	t.Helper()
	bustest.WaitRelayed(t, env.JS)
	bustest.Eventually(t, 60*time.Second, 20*time.Millisecond, "analytics caught up", func() (bool, any) {
		lag, err := a.Lag(t.Context())
		return err == nil && lag == 0, fmt.Sprintf("lag %d, error %v", lag, err)
	})
}

var errCrash = errors.New("injected crash")

// TestAnalytics_ThousandCalls runs 1,000 calls with known outcomes past
// two analytics processes at once, one of which dies between writing a
// batch and acknowledging it, and checks every number against the plan;
// then rebuilds while both run, and checks again.
func TestAnalytics_ThousandCalls(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	bustest.RunRelay(t, env.JS)

	var batches, otherBatches atomic.Int32
	_, crashedDone := runAnalytics(t, env, func(a *analytics.Analytics) {
		analytics.CrashAfterApply(a, func([]uint64) error {
			if batches.Add(1) == 3 {
				return errCrash
			}
			return nil
		})
	})
	runAnalytics(t, env, func(a *analytics.Analytics) {
		analytics.CrashAfterApply(a, func([]uint64) error {
			otherBatches.Add(1)
			return nil
		})
	})

	t0 := time.Now().UTC().Truncate(time.Hour).Add(-6 * time.Hour)
	calls := planCalls(1000, t0, 1)
	start := time.Now()
	runCalls(t, env.Store, calls)
	t.Logf("1000 calls in %s", time.Since(start))

	select {
	case err := <-crashedDone:
		require.ErrorIs(t, err, errCrash)
	case <-time.After(30 * time.Second):
		t.Fatal("the process meant to crash never did")
	}
	assert.Positive(t, otherBatches.Load(), "both processes took batches")
	// The crashed process restarts, as its supervisor would start it.
	restarted, _ := runAnalytics(t, env, nil)
	waitCaughtUp(t, env, restarted)
	t.Logf("caught up %s after the calls started", time.Since(start))

	opts := analytics.ReportOptions{Hours: 8, Until: t0.Add(7 * time.Hour)}
	first, err := restarted.Report(ctx, opts)
	require.NoError(t, err)
	x := expect(calls)
	checkReport(t, x, first)
	assert.Equal(t, uint64(1), first.Generation)

	t.Run("rebuild", func(t *testing.T) {
		rebuilder, err := analytics.Open(ctx, env.Conn, analytics.Config{BatchSize: 256, Log: bustest.Logger()})
		require.NoError(t, err)
		start := time.Now()
		gen, err := rebuilder.Rebuild(ctx)
		require.NoError(t, err)
		t.Logf("rebuilt in %s", time.Since(start))
		assert.Equal(t, uint64(2), gen)
		waitCaughtUp(t, env, restarted)
		again, err := restarted.Report(ctx, opts)
		require.NoError(t, err)
		assert.Equal(t, uint64(2), again.Generation)
		first.Generation, first.GeneratedAt = again.Generation, again.GeneratedAt
		assert.Equal(t, first, again, "a rebuild gives the same numbers")

		kv, err := env.JS.KeyValue(ctx, analytics.Bucket)
		require.NoError(t, err)
		_, err = kv.Get(ctx, "g1.applied")
		assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the old generation's checkpoint is gone with it")

		// The running processes moved to the new generation: later calls
		// are counted there, once.
		more := planCalls(20, t0.Add(5*time.Hour), 2)
		for i := range more {
			more[i].id = fmt.Sprintf("more-%d", i)
		}
		runCalls(t, env.Store, more)
		waitCaughtUp(t, env, restarted)
		after, err := restarted.Report(ctx, opts)
		require.NoError(t, err)
		checkReport(t, expect(append(slices.Clone(calls), more...)), after)
	})

	t.Run("recommendations", func(t *testing.T) {
		recs := map[string]wire.Recommendation{}
		for _, r := range first.Recommendations {
			recs[r.Kind+" "+r.Tool] = r
		}
		assert.Len(t, recs, 3, "%+v", first.Recommendations)

		allow, ok := recs[analytics.KindAllowRule+" web_search"]
		require.True(t, ok, "web_search is approved every time")
		assert.Equal(t, "web_search", allow.Rule)
		assert.Equal(t, "teams.research", allow.Scope, "every call came from research")
		assert.Equal(t, int64(300), allow.Evidence.Approved)
		assert.Equal(t, int64(300), allow.Evidence.Decided)
		assert.Equal(t, 1.0, allow.Evidence.ApprovalRate)
		assert.Contains(t, allow.Summary, "approved in all 300 of 300 decisions")
		snippet, err := policy.Parse([]byte(allow.Policy))
		require.NoError(t, err, allow.Policy)
		assert.Equal(t, []string{"web_search"}, snippet.Teams["research"].Rules.Allow)

		reject, ok := recs[analytics.KindReviewRejections+" deploy"]
		require.True(t, ok)
		assert.Greater(t, reject.Evidence.RejectionRate, 0.5)
		require.NotEmpty(t, reject.Evidence.TopRejectionReasons)
		assert.Equal(t, "too risky", reject.Evidence.TopRejectionReasons[0].Name)
		assert.Contains(t, reject.Summary, `"too risky"`)

		timeout, ok := recs[analytics.KindApprovalTimeout+" send_email"]
		require.True(t, ok)
		assert.Equal(t, "teams.ops", timeout.Scope)
		assert.Equal(t, int64(300_000), timeout.Evidence.ApprovalTimeoutMs)
		assert.NotEmpty(t, timeout.Evidence.FastestApprovers)
		longer, err := policy.Parse([]byte(timeout.Policy))
		require.NoError(t, err, timeout.Policy)
		assert.Equal(t, int64(600_000), *longer.Teams["ops"].ApprovalTimeoutMs)

		// Pasting the rule makes the next call run without asking.
		store := stores.NewPolicyStore(env.JS, env.Buckets.Policies)
		call := machine.Call{ToolCallID: "after-rule", ToolName: "web_search", Team: "research", CallerBotID: "agent", ConversationID: "conv-research", Arguments: []byte(`{"query":"nats"}`)}
		verdict := func() machine.Verdict {
			doc, _, err := store.Get(ctx)
			require.NoError(t, err)
			engine, err := policy.NewEngine(doc, nil, nil)
			require.NoError(t, err)
			v, err := engine.Evaluate(ctx, call)
			require.NoError(t, err)
			return v
		}
		require.Equal(t, machine.ActionAsk, verdict().Action, "before: the default policy asks")
		require.NoError(t, store.Update(ctx, func(doc *policy.Document) error { return mergePolicy(doc, snippet) }))
		assert.Equal(t, machine.ActionRun, verdict().Action, "after pasting %s", allow.Policy)
		require.NoError(t, store.AddAllowRule(ctx, allow.Team, allow.Rule), "the same rule through AddAllowRule")
		doc, _, err := store.Get(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"web_search"}, doc.Teams["research"].Rules.Allow, "pasted once")
		engine, err := policy.NewEngine(doc, nil, nil)
		require.NoError(t, err)
		e, err := machine.New(env.Store, machine.WithEvaluator(engine)).Submit(ctx, call)
		require.NoError(t, err)
		assert.Equal(t, machine.StateScheduled, e.Status)
	})
}

// mergePolicy merges a recommendation's document into doc as a human
// pasting it would: allow rules appended to the scope's.
func mergePolicy(doc, add *policy.Document) error {
	merge := func(dst **policy.Policy, src *policy.Policy) {
		if *dst == nil {
			*dst = &policy.Policy{}
		}
		for _, r := range src.Rules.Allow {
			if !slices.Contains((*dst).Rules.Allow, r) {
				(*dst).Rules.Allow = append((*dst).Rules.Allow, r)
			}
		}
		if src.ApprovalTimeoutMs != nil {
			(*dst).ApprovalTimeoutMs = src.ApprovalTimeoutMs
		}
	}
	if add.Default != nil {
		merge(&doc.Default, add.Default)
	}
	for team, p := range add.Teams {
		if doc.Teams == nil {
			doc.Teams = map[string]*policy.Policy{}
		}
		dst := doc.Teams[team]
		merge(&dst, p)
		doc.Teams[team] = dst
	}
	return nil
}

// TestAnalytics_Report reports the aggregates with a time series charts
// can draw at either resolution, and refuses a window past its bounds.
func TestAnalytics_Report(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	a, _ := runAnalytics(t, env, nil)
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	calls := planCalls(40, t0, 3)
	runCalls(t, env.Store, calls)
	waitCaughtUp(t, env, a)
	now := t0.Add(150 * time.Minute)
	analytics.SetClock(a, func() time.Time { return now })

	r, err := a.Report(t.Context(), analytics.ReportOptions{Hours: 3})
	require.NoError(t, err)
	checkReport(t, expect(calls), r)
	assert.Equal(t, now.UnixMilli(), r.GeneratedAt)
	assert.Equal(t, analytics.ResolutionHour, r.Series.Resolution)
	require.Len(t, r.Series.Points, 3)
	assert.Equal(t, t0.UnixMilli(), r.Series.From)
	assert.Equal(t, t0.Add(3*time.Hour).UnixMilli(), r.Series.To)

	r, err = a.Report(t.Context(), analytics.ReportOptions{Hours: 2, Resolution: analytics.ResolutionMinute, Until: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.Len(t, r.Series.Points, 120)
	var asked, decisions int64
	for i, p := range r.Series.Points {
		assert.Equal(t, t0.Add(time.Duration(i)*time.Minute).UnixMilli(), p.T)
		asked += p.Asked
		decisions += p.Decisions
	}
	var wantAsked, wantDecisions int64
	for _, c := range calls {
		if c.decision != "" {
			wantAsked++
		}
		if c.decision == "approve" || c.decision == "reject" {
			wantDecisions++
		}
	}
	assert.Equal(t, wantAsked, asked, "every ask falls in a minute of the window")
	assert.Equal(t, wantDecisions, decisions)

	for _, o := range []analytics.ReportOptions{{Hours: 10000}, {Resolution: "second"}, {Hours: 48, Resolution: analytics.ResolutionMinute}} {
		_, err := a.Report(t.Context(), o)
		assert.ErrorIs(t, err, analytics.ErrBadOptions, "%+v", o)
	}
}

// TestAnalytics_OnAClusterOfThree counts a run once with two processes on
// a 3-node cluster, the bucket and streams replicated three times.
func TestAnalytics_OnAClusterOfThree(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[1])
	bustest.RunRelay(t, env.JS)
	a, _ := runAnalytics(t, env, nil)
	runAnalytics(t, env, nil)
	kv, err := env.JS.KeyValue(t.Context(), analytics.Bucket)
	require.NoError(t, err)
	st, err := kv.Status(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 3, st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas)

	t0 := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	calls := planCalls(100, t0, 4)
	runCallsRetrying(t, env.Store, calls, 100)
	waitCaughtUp(t, env, a)
	r, err := a.Report(t.Context(), analytics.ReportOptions{Hours: 3, Until: t0.Add(2 * time.Hour)})
	require.NoError(t, err)
	checkReport(t, expect(calls), r)
}

// TestAnalytics_StartsWhereItsDurableConsumerStopped: a generation that
// a durable consumer fed (as toolgate did before checkpoints) goes on
// after that consumer's ack floor, and the consumer is removed: the
// events it acknowledged are not counted again, and those after it are.
func TestAnalytics_StartsWhereItsDurableConsumerStopped(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	bustest.RunRelay(t, env.JS)
	m := machine.New(env.Store, machine.WithEvaluator(evaluator))
	submit := func(id string) {
		_, err := m.Submit(ctx, machine.Call{ToolCallID: id, ToolName: "read_file", Team: "research", CallerBotID: "agent", ConversationID: "conv"})
		require.NoError(t, err)
	}
	// The old durable consumer has acknowledged the first call's events
	// (counted in the aggregates it fed, here none: they would count twice
	// if read again); the second call's come after.
	submit("acknowledged")
	bustest.WaitRelayed(t, env.JS)
	st, err := env.JS.Stream(ctx, wire.EventsStream)
	require.NoError(t, err)
	acked := st.CachedInfo().State.LastSeq
	require.Positive(t, acked)
	old, err := env.JS.CreateOrUpdateConsumer(ctx, wire.EventsStream, jetstream.ConsumerConfig{Durable: "toolgate-analytics-g1", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := old.Fetch(int(acked), jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	n := 0
	for msg := range batch.Messages() {
		require.NoError(t, msg.DoubleAck(ctx))
		n++
	}
	require.Equal(t, int(acked), n)
	submit("after")

	a, _ := runAnalytics(t, env, nil)
	waitCaughtUp(t, env, a)
	r, err := a.Report(ctx, analytics.ReportOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Totals.Calls, "the call after the consumer's ack floor, not the one before")
	_, err = env.JS.Consumer(ctx, wire.EventsStream, "toolgate-analytics-g1")
	assert.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "the durable consumer is gone")
}

// TestAnalytics_EveryQuorumApproverIsCounted: under a 2-of-2 quorum, the
// approval short of it counts for its approver as the one that settles
// the call counts for theirs; the call is approved once.
func TestAnalytics_EveryQuorumApproverIsCounted(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	a, _ := runAnalytics(t, env, nil)
	m := machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, Quorum: &machine.Quorum{Required: 2}}, nil
	})))
	ctx := t.Context()
	e, err := m.Submit(ctx, machine.Call{ToolName: "deploy", CallerBotID: "bot", ConversationID: "q"})
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "bob"})
	require.NoError(t, err)
	waitCaughtUp(t, env, a)

	r, err := a.Report(t.Context(), analytics.ReportOptions{})
	require.NoError(t, err)
	approved := map[string]int64{}
	for _, ap := range r.Approvers {
		approved[ap.Name] = ap.Approved
	}
	assert.Equal(t, map[string]int64{"alice": 1, "bob": 1}, approved)
	require.Len(t, r.Tools, 1)
	assert.EqualValues(t, 1, r.Tools[0].Approved, "the call is approved once")
	assert.Equal(t, map[machine.Decider]int64{machine.DecidedByPolicy: 1, machine.DecidedByQuorum: 1}, r.Tools[0].DecidedBy,
		"decisions by what made them: the policy asked, the quorum approved (a vote decides nothing)")
	assert.Equal(t, r.Tools[0].DecidedBy, r.Totals.DecidedBy)
}

// TestAnalytics_AProcessWhoseAggregatesAnotherWroteSinceReadsThemAgain:
// a process writes the aggregates it last wrote at the revision it wrote
// them, with no read; when another process has written them since, the
// compare-and-set fails and it reads them again. So three runs in turn,
// the first process's again after the second's, count every call once.
func TestAnalytics_AProcessWhoseAggregatesAnotherWroteSinceReadsThemAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	open := func() *analytics.Analytics {
		_, js := bustest.Connect(t, env.URLs)
		a, err := analytics.Open(t.Context(), bus.NewConn(js), analytics.Config{Log: bustest.Logger()})
		require.NoError(t, err)
		return a
	}
	// runUntilCaughtUp runs a until it has taken in every event so far.
	runUntilCaughtUp := func(a *analytics.Analytics) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		waitCaughtUp(t, env, a)
		cancel()
		require.NoError(t, <-done)
	}
	first, second := open(), open()
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	var calls []plannedCall
	for i, a := range []*analytics.Analytics{first, second, first} {
		more := planCalls(30, t0.Add(time.Duration(i)*10*time.Minute), uint64(10+i))
		for j := range more {
			more[j].id = fmt.Sprintf("run%d-%d", i, j)
		}
		runCalls(t, env.Store, more)
		calls = append(calls, more...)
		runUntilCaughtUp(a)
	}
	r, err := first.Report(t.Context(), analytics.ReportOptions{Hours: 3, Until: t0.Add(2 * time.Hour)})
	require.NoError(t, err)
	checkReport(t, expect(calls), r)
}

// TestAnalytics_CheckpointIsNeverLowered: a process behind another (its
// batch applied after the other's later one) does not lower the
// checkpoint, which Lag counts from: events the aggregates hold would
// count as still to come.
func TestAnalytics_CheckpointIsNeverLowered(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	ahead, err := analytics.Open(ctx, env.Conn, analytics.Config{Log: bustest.Logger()})
	require.NoError(t, err)
	behind, err := analytics.Open(ctx, env.Conn, analytics.Config{Log: bustest.Logger()})
	require.NoError(t, err)
	got, err := analytics.RaiseCheckpoint(ctx, ahead, 1, 10)
	require.NoError(t, err)
	require.EqualValues(t, 10, got)
	got, err = analytics.RaiseCheckpoint(ctx, behind, 1, 7)
	require.NoError(t, err)
	require.EqualValues(t, 10, got, "not lowered")
	got, err = analytics.RaiseCheckpoint(ctx, behind, 1, 12)
	require.NoError(t, err)
	require.EqualValues(t, 12, got, "raised over what it had not read")
}

// TestAnalytics_TimeoutRecommendationSaysWhatTheCallsWaited: calls that
// timed out under a policy that gave them 2 minutes are said to have
// waited 2 minutes, though the policy now gives calls 5.
func TestAnalytics_TimeoutRecommendationSaysWhatTheCallsWaited(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	a, _ := runAnalytics(t, env, nil)
	ctx := t.Context()
	parse := func(timeoutMs int) *policy.Document {
		doc, err := policy.Parse(fmt.Appendf(nil, "default: {requiresApprovalTools: [send_email], approvalTimeoutMs: %d, autoRejectOnTimeout: true}", timeoutMs))
		require.NoError(t, err)
		return doc
	}
	engine, err := policy.NewEngine(parse(120_000), nil, nil)
	require.NoError(t, err)
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	clk := toolgatetest.FixedClock(t0)
	m := machine.New(env.Store, machine.WithClock(clk.Now), machine.WithEvaluator(engine))
	var ids []string
	for i := range 6 {
		e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint("old-", i), ToolName: "send_email", CallerBotID: "bot", ConversationID: "mail"})
		require.NoError(t, err)
		ids = append(ids, e.PendingID)
	}
	clk.Set(t0.Add(2*time.Minute + time.Second))
	for _, id := range ids {
		e, err := m.Expire(ctx, id)
		require.NoError(t, err)
		require.Equal(t, machine.StateRejectedByTimeout, e.Status)
	}
	// The policy now gives 5 minutes; calls asked since are pending.
	require.NoError(t, engine.SetDocument(parse(300_000)))
	for i := range 2 {
		e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint("new-", i), ToolName: "send_email", CallerBotID: "bot", ConversationID: "mail"})
		require.NoError(t, err)
		require.Equal(t, t0.Add(2*time.Minute+time.Second+5*time.Minute).UnixMilli(), e.ApprovalTimeoutAt)
	}
	waitCaughtUp(t, env, a)

	r, err := a.Report(ctx, analytics.ReportOptions{})
	require.NoError(t, err)
	var rec *wire.Recommendation
	for i := range r.Recommendations {
		if r.Recommendations[i].Kind == analytics.KindApprovalTimeout {
			rec = &r.Recommendations[i]
		}
	}
	require.NotNil(t, rec, "%+v", r.Recommendations)
	assert.Contains(t, rec.Summary, "send_email timed out in 6 of 8 requests (75%) waiting 2m0s (calls since have been given up to 5m0s): raise approvalTimeoutMs in default to 4m0s")
	assert.Equal(t, int64(120_000), rec.Evidence.ApprovalTimeoutMs)
	assert.Equal(t, int64(300_000), r.Tools[0].ApprovalTimeoutMs, "the longest any call was given")
}

// TestAnalytics_CostsAreSummedExactly: thirteen calls that cost 0.01 each
// cost 0.13, and 0.07 and 0.06 estimated are 0.13, in the report and in
// its JSON.
func TestAnalytics_CostsAreSummedExactly(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.RunRelay(t, env.JS)
	a, _ := runAnalytics(t, env, nil)
	ctx := t.Context()
	m := machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionRun}, nil
	})))
	for i := range 13 {
		estimate := map[int]float64{0: 0.07, 1: 0.06}[i]
		e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint("c", i), ToolName: "report", CallerBotID: "bot", ConversationID: "cents", Team: "ops", EstimatedCost: estimate})
		require.NoError(t, err)
		_, err = m.Claim(ctx, e.PendingID, "exec", time.Minute)
		require.NoError(t, err)
		_, err = m.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec", Cost: 0.01})
		require.NoError(t, err)
	}
	waitCaughtUp(t, env, a)

	rep, err := a.Report(t.Context(), analytics.ReportOptions{})
	require.NoError(t, err)
	body, err := json.Marshal(rep)
	require.NoError(t, err)
	var r struct {
		Totals struct {
			Cost          json.Number `json:"cost"`
			EstimatedCost json.Number `json:"estimatedCost"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal(body, &r))
	assert.Equal(t, json.Number("0.13"), r.Totals.Cost)
	assert.Equal(t, json.Number("0.13"), r.Totals.EstimatedCost)
}

// TestStats_ReadsWhatAnOlderVersionStored: an aggregate whose sums of cost
// an older version kept as float64 is read rounded to the millionth, and
// written with both, so that a process of that version reads it too.
func TestStats_ReadsWhatAnOlderVersionStored(t *testing.T) {
	t.Parallel()
	var s analytics.Stats
	require.NoError(t, json.Unmarshal([]byte(`{"name":"report","calls":13,"cost":0.12999999999999998,"estimatedCost":0.30000000000000004}`), &s))
	assert.Equal(t, policy.Micros(130_000), s.Cost)
	assert.Equal(t, policy.Micros(300_000), s.EstimatedCost)
	assert.EqualValues(t, 13, s.Calls)

	data, err := json.Marshal(s)
	require.NoError(t, err)
	var stored map[string]any
	require.NoError(t, json.Unmarshal(data, &stored))
	assert.Equal(t, 130_000.0, stored["costMicros"])
	assert.Equal(t, 0.13, stored["cost"])
	assert.Equal(t, 300_000.0, stored["estimatedCostMicros"])
	assert.Equal(t, 0.3, stored["estimatedCost"])
	var again analytics.Stats
	require.NoError(t, json.Unmarshal(data, &again))
	assert.Equal(t, s, again)
}

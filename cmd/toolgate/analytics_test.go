package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// analyticsCLI runs a toolgate verb against url.
func analyticsCLI(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "--nats", url), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestAnalytics_TwoServeProcessesStatsAndRebuild runs two `serve --roles
// relay,analytics` processes (in-process; one also with intake) on one NATS server, drives calls
// with known outcomes, and checks that `toolgate stats` counts each once,
// that `toolgate analytics rebuild` gives the same numbers, and that the
// recommended rule, put in force with `toolgate policy set`, lets the next
// call run without asking.
func TestAnalytics_TwoServeProcessesStatsAndRebuild(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t).ClientURL()
	toolgatetest.Start(t, toolgatetest.Options{NATS: url, Roles: []string{"relay", "analytics"}})
	// The second also serves the request API, which `policy set` below
	// goes through.
	toolgatetest.Start(t, toolgatetest.Options{NATS: url, Roles: []string{"relay", "analytics", "intake"}})

	ctx := t.Context()
	_, js := servetest.Connect(t, url)
	calls, err := js.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	clk := new(toolgatetest.Clock)
	clk.Set(t0)
	m := machine.New(bus.NewKVStore(js, calls), machine.WithClock(clk.Now), machine.WithEvaluator(machine.EvaluatorFunc(
		func(_ context.Context, c machine.Call) (machine.Verdict, error) {
			if c.ToolName == "read_file" {
				return machine.Verdict{Action: machine.ActionRun, Reason: "read-only"}, nil
			}
			return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, AutoRejectOnTimeout: true, Reason: "ask"}, nil
		})))
	type step struct {
		tool, team, by, reason string
		approve                bool
		after                  time.Duration
	}
	var steps []step
	for i := range 14 {
		steps = append(steps, step{tool: "web_search", team: "research", by: []string{"alice", "bob"}[i%2], approve: true, after: time.Duration(10+i) * time.Second})
	}
	for i := range 10 {
		steps = append(steps, step{tool: "deploy", team: "ops", by: "carol", approve: i < 2, reason: "too risky", after: 2 * time.Minute})
	}
	for range 5 {
		steps = append(steps, step{tool: "read_file", team: "research"})
	}
	for i, s := range steps {
		clk.Set(t0.Add(time.Duration(i) * time.Minute))
		e, err := m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint("c", i), ToolName: s.tool, Team: s.team, CallerBotID: "agent", ConversationID: "conv"})
		require.NoError(t, err)
		if s.by == "" {
			continue
		}
		clk.Set(t0.Add(time.Duration(i)*time.Minute + s.after))
		reason := ""
		if !s.approve {
			reason = s.reason
		}
		_, err = m.Decide(ctx, e.PendingID, machine.Decision{Approve: s.approve, By: s.by, Reason: reason})
		require.NoError(t, err)
	}

	akv, err := js.KeyValue(ctx, analytics.Bucket)
	require.NoError(t, err, "the analytics role provisions its bucket")
	an := analytics.New(bus.NewConn(js), stores.NewAnalyticsStore(js, akv), analytics.Config{})
	caughtUp := func() {
		t.Helper()
		bustest.Eventually(t, 60*time.Second, 20*time.Millisecond, "the analytics caught up", func() (bool, any) {
			if !bustest.Relayed(ctx, js) {
				return false, "the relay behind the bucket"
			}
			lag, err := an.Lag(ctx)
			return err == nil && lag == 0, fmt.Sprintf("lag %d, error %v", lag, err)
		})
	}
	caughtUp()

	stats := func() wire.AnalyticsReport {
		t.Helper()
		code, stdout, stderr := analyticsCLI(t, url, "stats", "--json", "--hours", "3")
		require.Equal(t, 0, code, stderr)
		var r wire.AnalyticsReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
		return r
	}
	first := stats()
	byName := func(rows []wire.ToolReport) map[string]wire.ToolReport {
		out := map[string]wire.ToolReport{}
		for _, r := range rows {
			out[r.Name] = r
		}
		return out
	}
	tools := byName(first.Tools)
	assert.Equal(t, int64(14), tools["web_search"].Calls)
	assert.Equal(t, int64(14), tools["web_search"].Approved)
	assert.Equal(t, 1.0, tools["web_search"].ApprovalRate)
	assert.Equal(t, float64(16500), tools["web_search"].TimeToDecide.MeanMs, "10s to 23s")
	assert.Equal(t, int64(8), tools["deploy"].Rejected)
	assert.Equal(t, 0.8, tools["deploy"].RejectionRate)
	assert.Equal(t, []wire.NameCount{{Name: "too risky", Count: 8}}, tools["deploy"].TopRejectionReasons)
	assert.Equal(t, int64(5), tools["read_file"].RanUnasked)
	assert.Equal(t, int64(29), first.Totals.Calls)
	teams := byName(first.Teams)
	assert.Equal(t, int64(19), teams["research"].Calls)
	assert.Equal(t, int64(10), teams["ops"].Calls)
	require.Len(t, first.Approvers, 3)
	assert.Equal(t, "alice", first.Approvers[0].Name)
	assert.Equal(t, int64(7), first.Approvers[0].Decisions)
	assert.Equal(t, int64(10), first.Approvers[2].Decisions)
	var decisions int64
	for _, p := range first.Series.Points {
		decisions += p.Decisions
	}
	assert.Equal(t, int64(24), decisions, "the series holds every decision")

	var allow *wire.Recommendation
	for i, r := range first.Recommendations {
		if r.Kind == analytics.KindAllowRule {
			allow = &first.Recommendations[i]
		}
	}
	require.NotNil(t, allow, "%+v", first.Recommendations)
	assert.Equal(t, "web_search", allow.Tool)
	assert.Equal(t, "web_search", allow.Rule)
	assert.Equal(t, int64(14), allow.Evidence.Approved)

	code, table, stderr := analyticsCLI(t, url, "stats")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"TOOL", "web_search", "deploy", "80%", "too risky (8)", "APPROVER", "carol", "HOUR (UTC)",
		"RECOMMENDATIONS", "[allow_rule] web_search was approved in all 14 of 14", "rule: web_search in teams.research", "- web_search"} {
		assert.Contains(t, table, want)
	}

	code, out, stderr := analyticsCLI(t, url, "analytics", "rebuild")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "generation 2 in force")
	caughtUp()
	again := stats()
	assert.Equal(t, uint64(2), again.Generation)
	assert.Equal(t, first.Tools, again.Tools, "a rebuild gives the same numbers")
	assert.Equal(t, first.Teams, again.Teams)
	assert.Equal(t, first.Approvers, again.Approvers)
	assert.Equal(t, first.Recommendations, again.Recommendations)

	// Paste the recommendation: with no policy stored yet, the snippet is
	// the whole document.
	file := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte(allow.Policy), 0o600))
	code, _, stderr = analyticsCLI(t, url, "policy", "set", file)
	require.Equal(t, 0, code, stderr)
	pkv, err := js.KeyValue(ctx, wire.PoliciesBucket)
	require.NoError(t, err)
	doc, _, err := stores.NewPolicyStore(js, pkv).Get(ctx)
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	e, err := machine.New(bus.NewKVStore(js, calls), machine.WithEvaluator(engine)).Submit(ctx,
		machine.Call{ToolCallID: "after-rule", ToolName: "web_search", Team: "research", CallerBotID: "agent", ConversationID: "conv"})
	require.NoError(t, err)
	assert.Equal(t, machine.StateScheduled, e.Status, "the next call runs without asking: %s", e.StatusReason)
}

func TestAnalytics_CommandLines(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t).ClientURL()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"analytics"}, 2, "the subcommand comes first: toolgate analytics rebuild"},
		{[]string{"analytics", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"stats", "--hours", "0"}, 2, "--hours: must be 1 to"},
		{[]string{"stats", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"analytics", "rebuild", "--timeout", "0s"}, 2, "--timeout: must be positive"},
		{[]string{"stats"}, 1, "nothing answers toolgate.analytics"},
		{[]string{"analytics", "rebuild"}, 1, "no TOOL_EVENTS stream"},
	} {
		code, _, stderr := analyticsCLI(t, url, tc.args...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
	var out bytes.Buffer
	assert.Equal(t, 2, run(t.Context(), []string{"analytics"}, &out, &out))
	assert.True(t, strings.HasPrefix(out.String(), "Usage:"), out.String())
	out.Reset()
	assert.Equal(t, 0, run(t.Context(), []string{"analytics", "help"}, &out, &out))
	assert.True(t, strings.HasPrefix(out.String(), "Usage:"), out.String())
}

package gate_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// TestPolicyShadow_ReportIsTheDryRunOfTheSameCalls: with the dry run's
// candidate (dryrun_test.go) set as the shadow policy, 1,000 submits of
// mixed tools and teams are decided by the policy in force alone, and the
// shadow's report then says, count for count (overall, per tool, per
// team), what a dry run of the same document over the same calls says;
// so do the metric's differences. Only an admin sets, clears or promotes
// a shadow; a promotion of a revision the shadow is no longer at is
// refused, and one of the revision it is at puts it in force and clears
// it.
func TestPolicyShadow_ReportIsTheDryRunOfTheSameCalls(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	doc, err := policy.Parse([]byte(dryRunCurrent))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil)
	require.NoError(t, err)
	mx, err := metrics.New(prometheus.NewRegistry())
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine, Metrics: mx})
	admin := gate.Actor{Name: "root", Roles: []wire.Role{wire.RoleAdmin}}
	bot := gate.Actor{Name: "bot", Roles: []wire.Role{wire.RoleAgent}}
	alice := gate.Actor{Name: "alice", Roles: []wire.Role{wire.RoleApprover}}
	vic := gate.Actor{Name: "vic", Roles: []wire.Role{wire.RoleViewer}}
	exe := gate.Actor{Name: "exe", Roles: []wire.Role{wire.RoleExecutor}}
	_, err = g.SetPolicy(ctx, admin, wire.PolicyDocument{Document: dryRunCurrent})
	require.NoError(t, err)

	// None set yet; only an admin may set, clear or promote one, and a
	// document policy set refuses is refused.
	_, err = g.PolicyShadow(ctx, vic, wire.PolicyGetRequest{})
	require.ErrorIs(t, err, machine.ErrNotFound)
	assert.Contains(t, err.Error(), "no shadow policy is set")
	for _, a := range []gate.Actor{bot, alice, vic, exe} {
		_, err := g.SetPolicyShadow(ctx, a, wire.PolicyDocument{Document: dryRunCandidate})
		require.ErrorIs(t, err, machine.ErrForbidden, a.Name)
		assert.Contains(t, err.Error(), "may not set the shadow policy: that needs the role admin")
		_, err = g.ClearPolicyShadow(ctx, a, struct{}{})
		require.ErrorIs(t, err, machine.ErrForbidden, a.Name)
		_, err = g.PromotePolicyShadow(ctx, a, wire.PolicyShadowPromoteRequest{Revision: 1})
		require.ErrorIs(t, err, machine.ErrForbidden, a.Name)
	}
	for _, a := range []gate.Actor{bot, exe} {
		_, err := g.PolicyShadow(ctx, a, wire.PolicyGetRequest{})
		require.ErrorIs(t, err, machine.ErrForbidden, a.Name)
		_, err = g.PolicyShadowReport(ctx, a, wire.PolicyShadowReportRequest{})
		require.ErrorIs(t, err, machine.ErrForbidden, a.Name)
	}
	_, err = g.SetPolicyShadow(ctx, admin, wire.PolicyDocument{Document: "default: {approvalTimeoutMs: -1}"})
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.Contains(t, err.Error(), "default.approvalTimeoutMs")
	_, err = g.SetPolicyShadow(ctx, admin, wire.PolicyDocument{Document: "default:\n  notify: [{type: webhook, url: 'https://x', secret: '" + policy.RedactedValue + "'}]\n"})
	require.ErrorIs(t, err, machine.ErrInvalid, "the redaction placeholder is no secret")

	shadowDoc, err := g.SetPolicyShadow(ctx, admin, wire.PolicyDocument{Document: dryRunCandidate})
	require.NoError(t, err)
	require.NotZero(t, shadowDoc.Revision)
	got, err := g.PolicyShadow(ctx, vic, wire.PolicyGetRequest{})
	require.NoError(t, err)
	assert.Equal(t, shadowDoc, got)
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- g.Runtime().FollowShadow(fctx, slog.New(slog.DiscardHandler)) }()
	defer func() { stop(); require.NoError(t, <-followed) }()

	start := time.Now()
	var submitted [1000]*machine.Entry
	var eg errgroup.Group
	eg.SetLimit(16)
	for i := range submitted {
		eg.Go(func() error {
			e, err := g.Submit(ctx, bot, dryRunCall(i))
			submitted[i] = e
			return err
		})
	}
	require.NoError(t, eg.Wait())
	t.Logf("1,000 submits compared against the shadow in %s", time.Since(start).Round(time.Millisecond))
	for i, e := range submitted {
		want := []machine.State{machine.StateScheduled, machine.StatePendingApproval, machine.StatePendingApproval, machine.StateScheduled,
			machine.StatePendingApproval, machine.StateScheduled, machine.StateRejectedByPolicy, machine.StateScheduled}[i%8]
		require.Equal(t, want, e.Status, "call %d decided by the policy in force alone: %s", i, e.StatusReason)
	}
	// A submit sent again is the same call: compared once.
	_, err = g.Submit(ctx, bot, dryRunCall(0))
	require.NoError(t, err)

	var report *wire.PolicyShadowReport
	bustest.Eventually(t, 20*time.Second, 50*time.Millisecond, "the shadow's report counts every submit", func() (bool, any) {
		report, err = g.PolicyShadowReport(ctx, vic, wire.PolicyShadowReportRequest{})
		if err != nil {
			return false, err
		}
		return report.Calls >= 1000, report.Calls
	})
	dry, err := g.PolicyDryRun(ctx, admin, wire.PolicyDryRunRequest{Document: dryRunCandidate})
	require.NoError(t, err)
	require.Equal(t, 1000, dry.Calls)
	assert.Equal(t, dry.Calls, report.Calls)
	assert.Equal(t, dry.Changed, report.Changed)
	assert.Equal(t, 425, report.Changed)
	assert.Equal(t, dry.Verdicts, report.Verdicts)
	assert.Equal(t, dry.ByTool, report.ByTool)
	assert.Equal(t, dry.ByTeam, report.ByTeam)
	assert.Zero(t, report.Skipped)
	assert.Equal(t, shadowDoc.Revision, report.ShadowRevision)
	assert.True(t, report.Set)
	require.Len(t, report.Examples, 15, "5 of each of the 3 changes")
	reasons := map[string][2]string{}
	for _, ex := range dry.Examples {
		reasons[ex.PendingID] = [2]string{ex.CurrentReason, ex.CandidateReason}
	}
	for i, ex := range report.Examples {
		assert.Equal(t, [2]string{report.Verdicts[i/5].From, report.Verdicts[i/5].To}, [2]string{ex.From, ex.To}, "example %d", i)
		assert.Equal(t, "bot", ex.CallerBotID)
		assert.NotEmpty(t, ex.PendingID)
		assert.NotEmpty(t, ex.CurrentReason)
		if r, ok := reasons[ex.PendingID]; ok {
			assert.Equal(t, r, [2]string{ex.CurrentReason, ex.CandidateReason}, "the dry run's reasons for %s", ex.PendingID)
		}
	}
	for _, c := range dry.Verdicts {
		if c.From != c.To {
			assert.Equal(t, float64(c.Calls), testutil.ToFloat64(mx.ShadowDifferences.WithLabelValues(metrics.ShadowChange(c.From, c.To))), "%s->%s", c.From, c.To)
		}
	}
	assert.Equal(t, 1000.0, testutil.ToFloat64(mx.ShadowCompared))
	_, err = g.PolicyShadowReport(ctx, vic, wire.PolicyShadowReportRequest{Examples: 51})
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.Contains(t, err.Error(), "examples: must be 1 to 50, got 51")

	// Promote: only the revision the shadow is at.
	_, err = g.PromotePolicyShadow(ctx, admin, wire.PolicyShadowPromoteRequest{})
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.Contains(t, err.Error(), "revision: required")
	_, err = g.PromotePolicyShadow(ctx, admin, wire.PolicyShadowPromoteRequest{Revision: shadowDoc.Revision - 1})
	require.ErrorIs(t, err, machine.ErrConflict)
	assert.Contains(t, err.Error(), fmt.Sprintf("the shadow policy is at revision %d now, not %d", shadowDoc.Revision, shadowDoc.Revision-1))
	promoted, err := g.PromotePolicyShadow(ctx, admin, wire.PolicyShadowPromoteRequest{Revision: shadowDoc.Revision})
	require.NoError(t, err)
	assert.Greater(t, promoted.Revision, shadowDoc.Revision)
	assert.Equal(t, shadowDoc.Document, promoted.Document, "the shadow is the policy in force")
	_, err = g.PolicyShadow(ctx, vic, wire.PolicyGetRequest{})
	require.ErrorIs(t, err, machine.ErrNotFound, "and no shadow any more")
	after, err := g.PolicyShadowReport(ctx, alice, wire.PolicyShadowReportRequest{})
	require.NoError(t, err)
	assert.Equal(t, shadowDoc.Revision, after.ShadowRevision, "the last shadow's report stays")
	assert.False(t, after.Set)
	assert.Equal(t, 1000, after.Calls)

	// Clear: set one, clear it, clear again.
	again, err := g.SetPolicyShadow(ctx, admin, wire.PolicyDocument{Document: dryRunCurrent})
	require.NoError(t, err)
	cleared, err := g.ClearPolicyShadow(ctx, admin, struct{}{})
	require.NoError(t, err)
	assert.Equal(t, again.Revision, cleared.Revision)
	cleared, err = g.ClearPolicyShadow(ctx, admin, struct{}{})
	require.NoError(t, err)
	assert.Zero(t, cleared.Revision, "none was set")
	_, err = g.PromotePolicyShadow(ctx, admin, wire.PolicyShadowPromoteRequest{Revision: again.Revision})
	require.ErrorIs(t, err, machine.ErrNotFound)
}

// TestPolicyShadow_FlowsAsTheDryRunReplaysThem: a shadow policy's flows
// see the calls that completed, as a dry run's replay does, though the
// policy in force has none: a send after a read in the same
// conversation would be asked about under the shadow, and is run, and
// the report counts what a dry run of the shadow's document counts.
func TestPolicyShadow_FlowsAsTheDryRunReplaysThem(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	clock := &testClock{now: time.Now().UTC().Truncate(time.Millisecond)}
	noFlows := strings.Split(flowsPolicy, "  flows:")[0]
	doc, err := policy.Parse([]byte(noFlows))
	require.NoError(t, err)
	engine, err := policy.NewEngine(doc, nil, nil, policy.WithClock(clock.Now), policy.WithFlowMarks(stores.NewFlowMarks(env.JS, env.Buckets.Flows)))
	require.NoError(t, err)
	g := gate.New(gate.Config{Conn: env.Conn, Buckets: env.Buckets, Policy: engine, Clock: clock.Now})
	_, err = g.SetPolicy(ctx, gate.System, wire.PolicyDocument{Document: noFlows})
	require.NoError(t, err)
	shadowDoc, err := g.SetPolicyShadow(ctx, gate.System, wire.PolicyDocument{Document: flowsPolicy})
	require.NoError(t, err)
	bot, exec, vic := actor("bot", wire.RoleAgent), actor("exec", wire.RoleExecutor), actor("vic", wire.RoleViewer)

	n := 0
	submit := func(conv, tool, args string) *machine.Entry {
		t.Helper()
		n++
		clock.Skip(time.Second)
		e, err := g.Submit(ctx, bot, machine.Call{ToolCallID: fmt.Sprint("t", n), ToolName: tool, ConversationID: conv, Arguments: []byte(args)})
		require.NoError(t, err)
		require.Equal(t, machine.StateScheduled, e.Status, "%s runs: the policy in force has no flows", tool)
		return e
	}
	outside := `{"to":"eve@evil.test"}`
	read := submit("A", "mcp__mail__read_inbox", `{}`)
	_, err = g.ClaimAt(ctx, exec, wire.ReportRequest{PendingID: read.PendingID, By: "w", LeaseMs: time.Minute.Milliseconds()})
	require.NoError(t, err)
	clock.Skip(time.Second)
	_, err = g.Complete(ctx, exec, wire.ReportRequest{PendingID: read.PendingID, By: "w"})
	require.NoError(t, err)
	submit("A", "mcp__mail__send_email", outside)
	submit("B", "mcp__mail__send_email", outside)
	submit("A", "mcp__mail__send_email", `{"to":"bob@example.com"}`)

	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- g.Runtime().FollowShadow(fctx, slog.New(slog.DiscardHandler)) }()
	stop() // records what was compared, then returns
	require.NoError(t, <-followed)
	report, err := g.PolicyShadowReport(ctx, vic, wire.PolicyShadowReportRequest{})
	require.NoError(t, err)
	dry, err := g.PolicyDryRun(ctx, vic, wire.PolicyDryRunRequest{Document: flowsPolicy, Since: clock.Now().Add(-time.Hour).UnixMilli()})
	require.NoError(t, err)
	assert.Equal(t, shadowDoc.Revision, report.ShadowRevision)
	assert.Equal(t, []wire.VerdictCount{{From: "allow", To: "ask", Calls: 1}, {From: "allow", To: "allow", Calls: 3}}, report.Verdicts)
	assert.Equal(t, dry.Verdicts, report.Verdicts)
	assert.Equal(t, dry.ByTool, report.ByTool)
	require.Len(t, report.Examples, 1)
	assert.Contains(t, report.Examples[0].CandidateReason, "follows mcp__mail__read_inbox ("+read.PendingID+")")
}

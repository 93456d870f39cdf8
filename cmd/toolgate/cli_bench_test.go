package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bench"
)

// TestBench_EmbeddedReportsBothPathsAgainstCAS: a short bench of an
// embedded toolgate measures each path and the CAS baseline, and the
// ratios are the one divided by the other.
func TestBench_EmbeddedReportsBothPathsAgainstCAS(t *testing.T) {
	t.Parallel()
	r := cliEnv(t, nil, "bench", "--embedded", "--agents", "4", "--calls", "20", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var report bench.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	assert.Equal(t, "embedded", report.Target)
	require.Greater(t, report.CASPerSec, 0.0)
	require.Len(t, report.Paths, 2)
	for _, p := range report.Paths {
		assert.Greater(t, p.PerSec, 0.0, p.Name)
		assert.InDelta(t, p.PerSec/report.CASPerSec, p.Ratio, 1e-9, p.Name)
		assert.Greater(t, p.SubmitResult.P50, 0.0, p.Name)
		assert.GreaterOrEqual(t, p.SubmitResult.Max, p.SubmitResult.P99, p.Name)
		assert.Greater(t, p.CPUMs, 0.0, "%s: the process's CPU per lifecycle", p.Name)
		// At least a submit, a claim and a report, each a request in and
		// an answer out, and the KV writes they make.
		assert.Greater(t, p.Messages, 8.0, "%s: the server's messages per lifecycle", p.Name)
		// No call costs a JetStream consumer (a watch of its own, say):
		// one created at most in the run, by a process starting.
		assert.Less(t, p.Consumers, 0.5, "%s: JetStream consumers created or deleted per lifecycle", p.Name)
	}
	assert.Equal(t, "approval", report.Paths[0].Name)
	require.NotNil(t, report.Paths[0].DecideHandler, "the approval path times decision to handler")
	assert.Greater(t, report.Paths[0].DecideHandler.P50, 0.0)
	assert.Nil(t, report.Paths[1].DecideHandler, "the auto path has no decision")

	// Decision→handler by step, each from the streams' timestamps: in
	// order, each no less than 0, and together about the whole.
	hops := report.Paths[0].Hops
	var names []string
	sum := 0.0
	for _, h := range hops {
		names = append(names, h.Name)
		assert.GreaterOrEqual(t, h.P50, 0.0, h.Name)
		assert.GreaterOrEqual(t, h.Max, h.P99, h.Name)
		assert.GreaterOrEqual(t, h.P99, h.P50, h.Name)
		sum += h.P50
	}
	assert.Equal(t, []string{"decision→committed", "committed→claimed", "claimed→handler"}, names)
	assert.LessOrEqual(t, sum, report.Paths[0].DecideHandler.Max, "the steps' medians add up to no more than the slowest whole")
	assert.Empty(t, report.Paths[1].Hops)
}

// TestBench_AToolgateWhosePolicyDoesNotAskSaysSo: against a running
// toolgate, the bench needs a policy that asks about bench_approval; one
// that does not is named, with the policy to give.
func TestBench_AToolgateWhosePolicyDoesNotAskSaysSo(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: none}\n")
	r := cli(t, url, "bench", "--agents", "2", "--calls", "2", "--path", "approval")
	assert.Equal(t, exitRefused, r.code, r.stdout)
	assert.Contains(t, r.stderr, "the policy in force must ask about bench_approval and run bench_auto")

	r = cli(t, url, "bench", "--sync", "always")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--sync: with --embedded only")

	r = cli(t, url, "bench", "--path", "sideways")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `--path: approval, auto or both, got "sideways"`)
}

// TestBench_EmbeddedWithEveryRole: --roles all measures a whole serve (its
// notifier, analytics, executor and http role beside the lifecycle's
// roles), and a set of roles a lifecycle cannot run on is refused.
func TestBench_EmbeddedWithEveryRole(t *testing.T) {
	t.Parallel()
	r := cliEnv(t, nil, "bench", "--embedded", "--roles", "all", "--agents", "2", "--calls", "5", "--path", "approval", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var report bench.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	require.Len(t, report.Paths, 1)
	assert.Equal(t, "approval", report.Paths[0].Name)
	assert.Greater(t, report.Paths[0].PerSec, 0.0)
	assert.Greater(t, report.Paths[0].Messages, 8.0)

	r = cliEnv(t, nil, "bench", "--embedded", "--roles", "relay,timer", "--calls", "1")
	assert.Equal(t, exitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, "--roles: a lifecycle needs relay,intake,timer, got relay,timer")

	r = cliEnv(t, nil, "bench", "--embedded", "--roles", "sideways")
	assert.Equal(t, exitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, `unknown role "sideways"`)
}

// TestBench_ARunningToolgatesServerMessagesAreCounted: against a toolgate
// serving elsewhere, the bench reads its servers' statistics with a
// system credential made from --data's keys, and reports the messages a
// lifecycle costs them.
func TestBench_ARunningToolgatesServerMessagesAreCounted(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default:\n  requiresApprovalTools: [bench_approval]\n  approvalTimeoutMs: 600000\n")
	r := cli(t, url, "bench", "--agents", "2", "--calls", "5", "--path", "approval", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var report bench.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	require.Len(t, report.Paths, 1)
	assert.Greater(t, report.Paths[0].Messages, 8.0, "the servers' messages per lifecycle")
}

// TestBench_SyncBothMeasuresAlwaysBesideInterval: --sync both runs the
// bench against an embedded toolgate that syncs on its interval, then one
// that syncs every write, and reports both (and, in text, the cost).
func TestBench_SyncBothMeasuresAlwaysBesideInterval(t *testing.T) {
	t.Parallel()
	r := cliEnv(t, nil, "bench", "--embedded", "--agents", "2", "--calls", "10", "--path", "auto", "--sync", "both", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var reports []bench.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &reports), r.stdout)
	require.Len(t, reports, 2)
	for i, sync := range []string{"interval", "always"} {
		assert.Equal(t, sync, reports[i].Sync)
		require.Len(t, reports[i].Paths, 1)
		assert.Greater(t, reports[i].Paths[0].PerSec, 0.0, sync)
		assert.Greater(t, reports[i].CASPerSec, 0.0, sync)
	}

	r = cliEnv(t, nil, "bench", "--embedded", "--agents", "2", "--calls", "5", "--path", "auto", "--sync", "both")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "sync always against interval, in this run:")
	assert.Contains(t, r.stdout, "auto lifecycles")

	r = cliEnv(t, nil, "bench", "--embedded", "--sync", "sometimes")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `--sync: interval, always or both, got "sometimes"`)
}

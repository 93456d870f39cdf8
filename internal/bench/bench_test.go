package bench_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/toolgatetest"
)

// embedded is a run against a toolgate of the bench's own.
func embedded(agents, calls int, paths ...string) bench.Config {
	return bench.Config{Agents: agents, Calls: calls, Paths: paths, Embedded: true, Roles: bench.LifecycleRoles(), Sync: server.SyncInterval}
}

// TestRun_EmbeddedMeasuresBothPathsAgainstCAS: a short bench of an
// embedded toolgate measures each path and the CAS baseline, and the
// ratios are the one divided by the other.
func TestRun_EmbeddedMeasuresBothPathsAgainstCAS(t *testing.T) {
	t.Parallel()
	report, err := bench.Run(t.Context(), embedded(4, 20, "approval", "auto"))
	require.NoError(t, err)
	assert.Equal(t, "embedded", report.Target)
	assert.Equal(t, server.SyncInterval, report.Sync)
	assert.Equal(t, 1, report.CASReplicas, "one server's calls have one replica")
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

// TestRun_EmbeddedWithEveryRole: with every role (its notifier,
// analytics, executor and http role beside the lifecycle's roles), the
// bench measures a whole serve.
func TestRun_EmbeddedWithEveryRole(t *testing.T) {
	t.Parallel()
	cfg := embedded(2, 5, "approval")
	cfg.Roles = server.Roles{"all"}
	report, err := bench.Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Len(t, report.Paths, 1)
	assert.Equal(t, "approval", report.Paths[0].Name)
	assert.Greater(t, report.Paths[0].PerSec, 0.0)
	assert.Greater(t, report.Paths[0].Messages, 8.0)
}

// TestRun_ARunningToolgatesServerMessagesAreCounted: against a toolgate
// serving elsewhere, the bench reads its servers' statistics with a
// system credential made from its data directory's keys, and reports the
// messages a lifecycle costs them.
func TestRun_ARunningToolgatesServerMessagesAreCounted(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: bench.Policy})
	report, err := bench.Run(t.Context(), bench.Config{Agents: 2, Calls: 5, Paths: []string{"approval"}, Conn: bus.ConnConfig{URLs: g.NATSURL}, Data: g.Data})
	require.NoError(t, err)
	assert.Equal(t, g.NATSURL, report.Target)
	assert.Empty(t, report.Sync, "the servers sync as their own config says")
	require.Len(t, report.Paths, 1)
	assert.Greater(t, report.Paths[0].Messages, 8.0, "the servers' messages per lifecycle")
	assert.Zero(t, report.Paths[0].CPUMs, "no serve process named")
}

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bench"
)

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

// TestBench_EmbeddedWithRolesALifecycleCannotRunOnIsRefused: --roles
// must hold the roles a lifecycle needs, each a role.
func TestBench_EmbeddedWithRolesALifecycleCannotRunOnIsRefused(t *testing.T) {
	t.Parallel()
	r := cliEnv(t, nil, "bench", "--embedded", "--roles", "relay,timer", "--calls", "1")
	assert.Equal(t, exitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, "--roles: a lifecycle needs relay,intake,timer, got relay,timer")

	r = cliEnv(t, nil, "bench", "--embedded", "--roles", "sideways")
	assert.Equal(t, exitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, `unknown role "sideways"`)
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

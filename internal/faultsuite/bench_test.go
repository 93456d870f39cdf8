package faultsuite

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bench"
)

// TestBench_OnAClusterTheBaselineIsReplicatedAsTheCalls: against a
// toolgate on a 3-node cluster (replicas 3), the CAS baseline's bucket has
// three replicas too, as toolgate's calls do, and the report says so: a
// compare-and-set on one replica is no measure of one on three.
func TestBench_OnAClusterTheBaselineIsReplicatedAsTheCalls(t *testing.T) {
	t.Parallel()
	cluster := startNATSCluster(t, 3)
	policy := writeFile(t, "policy.yaml", "default:\n  requiresApprovalTools: [bench_approval]\n  approvalTimeoutMs: 600000\n")
	startServe(t, "--nats", cluster.URLs, "--replicas", "3", "--data", cluster.auth, "--policy", policy, "--http", "127.0.0.1:0")
	r := cli(t, cluster.URLs, "bench", "--agents", "2", "--calls", "3", "--path", "approval", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var report bench.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	assert.Equal(t, 3, report.CASReplicas)
	require.Len(t, report.Paths, 1)
	assert.Greater(t, report.Paths[0].PerSec, 0.0)
	r = cli(t, cluster.URLs, "bench", "--agents", "1", "--calls", "2", "--path", "auto")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "raw KV compare-and-set (R3)")
	assert.Contains(t, r.stdout, "messages: every server's", "the messages a lifecycle are not one server's")

	r = cli(t, "", "bench", "--embedded", "--agents", "2", "--calls", "2", "--path", "auto")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "raw KV compare-and-set (R1)", "one server's calls have one replica")
	assert.NotContains(t, r.stdout, "messages: every server's")
}

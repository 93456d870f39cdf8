package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
)

// TestCLI_ATimeoutSaysItsDeadlineAndWhatAResubmitWouldMeet: an agent
// whose call nobody decided is told when the deadline was and whether a
// resubmit would be asked again, and by which rule.
func TestCLI_ATimeoutSaysItsDeadlineAndWhatAResubmitWouldMeet(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: all, approvalTimeoutMs: 1000}\n")
	r := cli(t, url, "submit", "--nats-creds", server.CredsPath(servetest.DataDir(t, url), "agent"),
		"--tool", "deploy", "--args", `{"env":"prod"}`, "--conversation", "conv-t", "--wait")
	require.Equal(t, 3, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	assert.Regexp(t, `timed out: nobody decided by \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; a resubmit would be asked again \(requiresApprovalTools \(default\)\)`, r.stderr)
}

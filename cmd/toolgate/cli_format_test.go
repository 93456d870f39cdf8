package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/wire"
)

// TestPrintDryRun_CountsAgreeWithTheirWords: a count of one is followed by
// a singular noun and verb, any other by plural ones.
func TestPrintDryRun_CountsAgreeWithTheirWords(t *testing.T) {
	t.Parallel()
	print := func(r wire.PolicyDryRunReply) string {
		var b strings.Builder
		require.NoError(t, printDryRun(&b, "candidate.yaml", &r))
		return b.String()
	}
	one := print(wire.PolicyDryRunReply{Calls: 1, Skipped: 1, SkippedReason: "arguments: not an object", Recorded: wire.DryRunRecorded{Current: 1, Candidate: 1}})
	assert.Contains(t, one, "\n1 call from ")
	assert.Contains(t, one, "\n1 call could not be evaluated and is left out (arguments: not an object)\n")
	assert.Contains(t, one, "against the verdicts recorded: 1 call differs under the policy in force")
	two := print(wire.PolicyDryRunReply{Calls: 2, Skipped: 2, Recorded: wire.DryRunRecorded{Current: 2}})
	assert.Contains(t, two, "\n2 calls from ")
	assert.Contains(t, two, "\n2 calls could not be evaluated and are left out")
	assert.Contains(t, two, "against the verdicts recorded: 2 calls differ under the policy in force")
	none := print(wire.PolicyDryRunReply{})
	assert.Contains(t, none, "\n0 calls from ")
}

func TestCounted(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1 call", counted(1, "call", "calls"))
	assert.Equal(t, "0 calls", counted(0, "call", "calls"))
	assert.Equal(t, "2 events", counted(uint64(2), "event", "events"))
	assert.Equal(t, "1 hour", counted(int64(1), "hour", "hours"))
}

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// TestCLI_ShowsTheRiskFirstAndTheDigestAnApprovalBinds: a call the
// policy's risk map marks high is listed by pending with its risk, and
// show prints the risk before anything else and the arguments digest an
// approval binds; a call no pattern marks shows "-" and no risk line.
func TestCLI_ShowsTheRiskFirstAndTheDigestAnApprovalBinds(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, `
default:
  requiresApprovalTools: all
  rules:
    ask: ["Bash(git push *)"]
  risk:
    "Bash(git push *)": high
`)
	ctx := t.Context()
	bot := agent(t, url)
	push, err := bot.Submit(ctx, bashCall("conv-r", "push", "git push origin main"))
	require.NoError(t, err)
	require.Equal(t, machine.RiskHigh, push.Risk)
	plain, err := bot.Submit(ctx, bashCall("conv-r", "ls", "ls"))
	require.NoError(t, err)
	require.Empty(t, plain.Risk)

	r := cli(t, url, "pending", "--conversation", "conv-r")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^conv-r\.push\s+Bash\s+PENDING_APPROVAL\s+high\s+bot-1`, r.stdout)
	assert.Regexp(t, `(?m)^conv-r\.ls\s+Bash\s+PENDING_APPROVAL\s+-\s+bot-1`, r.stdout)

	r = cli(t, url, "show", push.PendingID)
	require.Equal(t, 0, r.code, r.stderr)
	first, _, _ := strings.Cut(r.stdout, "\n")
	assert.Regexp(t, `^Risk:\s+high$`, first, "the risk is shown first")
	assert.Regexp(t, `Arguments digest:\s+`+push.ArgumentsDigest+` \(what an approval binds\)`, r.stdout)
	r = cli(t, url, "show", plain.PendingID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "Risk:")
}

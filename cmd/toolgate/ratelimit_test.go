package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestRateLimit_FromTheCLI: a rate rule as docs/policy.md writes it, calls
// submitted with `toolgate submit`, and `toolgate stats` showing the count.
func TestRateLimit_FromTheCLI(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: `
default:
  requiresApprovalTools: none
  rateLimits:
    - {match: "Bash(rm *)", max: 2, per: 10m}
`})
	url := served(t, g)
	var last machine.Entry
	for i := range 3 {
		r := cli(t, url, "submit", "--tool", "Bash", "--args", fmt.Sprintf(`{"command":"rm /tmp/x%d"}`, i),
			"--conversation", "rate-cli", "--team", "ops", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &last), r.stdout)
		if i < 2 {
			assert.NotEqual(t, machine.StatePendingApproval, last.Status, last.StatusReason)
		}
	}
	assert.Equal(t, machine.StatePendingApproval, last.Status)
	assert.Equal(t, `rateLimits[0] "Bash(rm *)" (default): 2 of 2 in the last 10m for team ops`, last.StatusReason)

	// stats asks the request API for the analytics and the rate limits:
	// toolgate's own credential and the admin's (the CLI's default) alike.
	table := `RATE LIMITS\nRULE\s+LIMIT\s+THEN\s+COUNTS\s+HELD\s+NEXT FREED IN\n` +
		`rateLimits\[0\] "Bash\(rm \*\)" \(default\)\s+2 per 10m\s+ask\s+team ops\s+2 of 2\s+\d+m\d+s\n`
	r := cli(t, url, "stats", "--nats-creds", g.Creds())
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "TOOL ", "the analytics")
	assert.Regexp(t, table, r.stdout)
	r = cli(t, url, "stats")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "TOOL ", "the analytics, with the admin's credential")
	assert.Regexp(t, table, r.stdout)

	r = cli(t, url, "stats", "--json", "--nats-creds", g.Creds())
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		RateLimits []wire.RateLimit `json:"rateLimits"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.RateLimits, 1)
	require.Len(t, rep.RateLimits[0].Counters, 1)
	assert.Equal(t, "ops", rep.RateLimits[0].Counters[0].Value)
	assert.Equal(t, 2, rep.RateLimits[0].Counters[0].Count)
}

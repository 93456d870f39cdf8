package policy_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// TestDocs_PolicyExamplesParse: every YAML example of docs/policy.md is a
// whole document the policy package accepts, so the reference cannot
// drift from what toolgate reads.
func TestDocs_PolicyExamplesParse(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/policy.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	require.GreaterOrEqual(t, len(blocks), 6, "an example for each of the reference's sections")
	for i, b := range blocks {
		_, err := policy.Parse([]byte(b[1]))
		assert.NoError(t, err, "docs/policy.md, YAML example %d:\n%s", i+1, b[1])
	}
	for _, field := range []string{"editable:", "redact:", "risk:", "approvalReminderPercent:", "approvers:", "rateLimits:"} {
		assert.Contains(t, string(doc), field, "docs/policy.md shows %s in an example", field)
	}
}

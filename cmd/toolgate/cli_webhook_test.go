package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWebhookSecret_PrintsANewStandardWebhooksSecret: each run prints a new
// whsec_ secret, which the Standard Webhooks library takes and `policy
// validate` accepts in a webhook's secrets.
func TestWebhookSecret_PrintsANewStandardWebhooksSecret(t *testing.T) {
	t.Parallel()
	a, b := cli(t, "", "webhook-secret"), cli(t, "", "webhook-secret")
	require.Equal(t, exitOK, a.code, a.stderr)
	require.Equal(t, exitOK, b.code, b.stderr)
	assert.Regexp(t, `^whsec_[A-Za-z0-9+/]{43}=\n$`, a.stdout)
	assert.NotEqual(t, a.stdout, b.stdout, "a new secret each time")
	_, err := standardwebhooks.NewWebhook(strings.TrimSpace(a.stdout))
	assert.NoError(t, err, "the library takes it")

	doc := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(doc, fmt.Appendf(nil, "default:\n  notify:\n    - {type: webhook, url: https://hooks.example/tg, secrets: [%q, %q]}\n",
		strings.TrimSpace(a.stdout), strings.TrimSpace(b.stdout)), 0o600))
	r := cli(t, "", "policy", "validate", doc)
	assert.Equal(t, exitOK, r.code, "policy validate: %s", r.stderr)

	r = cli(t, "", "webhook-secret", "extra")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `unexpected argument "extra"`)
}

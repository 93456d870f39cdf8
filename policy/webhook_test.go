package policy

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// whsec is a Standard Webhooks secret whose key is n bytes of b.
func whsec(b byte, n int) string {
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(b), n)))
}

func TestNewWebhookSecret(t *testing.T) {
	t.Parallel()
	a, b := NewWebhookSecret(), NewWebhookSecret()
	assert.NotEqual(t, a, b)
	assert.Regexp(t, `^whsec_[A-Za-z0-9+/]{43}=$`, a)
	key, err := WebhookKey(a)
	require.NoError(t, err)
	assert.Len(t, key, 32)
}

func TestWebhookKey(t *testing.T) {
	t.Parallel()
	key, err := WebhookKey(whsec('k', 24))
	require.NoError(t, err)
	assert.Equal(t, []byte(strings.Repeat("k", 24)), key, "a whsec_ secret is its key, base64")
	key, err = WebhookKey("s3cr3t")
	require.NoError(t, err)
	assert.Equal(t, []byte("s3cr3t"), key, "any other secret is its bytes, as toolgate's were before")

	_, err = WebhookKey("whsec_not base64!")
	assert.ErrorContains(t, err, "a whsec_ secret must be followed by its key in standard base64")
	_, err = WebhookKey(whsec('k', 23))
	assert.EqualError(t, err, "a whsec_ secret's key must be 24 to 64 bytes, got 23")
	_, err = WebhookKey(whsec('k', 65))
	assert.EqualError(t, err, "a whsec_ secret's key must be 24 to 64 bytes, got 65")
}

func TestParse_WebhookSecrets(t *testing.T) {
	t.Parallel()
	a, b := whsec('a', 32), whsec('b', 32)
	doc, err := Parse([]byte(`default:
  notify:
    - {type: webhook, url: "https://h.example/one", secrets: ["` + a + `", "env:NEXT_HOOK_SECRET"]}
    - {type: webhook, url: "https://h.example/two", secret: legacy-secret, secrets: ["` + b + `"], legacySignature: true}
`))
	require.NoError(t, err)
	one, two := doc.Default.Notify[0], doc.Default.Notify[1]
	assert.Equal(t, []string{a, "env:NEXT_HOOK_SECRET"}, one.SigningSecrets())
	assert.Equal(t, []string{"legacy-secret", b}, two.SigningSecrets(), "secret signs first, then secrets")
	assert.True(t, two.LegacySignature)

	out, err := Marshal(doc)
	require.NoError(t, err)
	again, err := Parse(out)
	require.NoError(t, err)
	assert.Equal(t, doc, again, "secrets and legacySignature survive Marshal")

	c := doc.Clone()
	c.Default.Notify[0].Secrets[0] = "changed"
	assert.Equal(t, a, doc.Default.Notify[0].Secrets[0], "Clone copies the secrets")

	red := Redacted(doc)
	assert.Equal(t, []string{RedactedValue, "env:NEXT_HOOK_SECRET"}, red.Default.Notify[0].Secrets, "values hidden, references shown")
	assert.Equal(t, a, doc.Default.Notify[0].Secrets[0], "the document redacted is left as it was")
	_, err = Parse(must(Marshal(red)))
	assert.ErrorContains(t, err, "default.notify[0].secrets[0]: is \"[redacted]\"", "read redacted and set again, it is refused")
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestParse_WebhookSecretErrorsNameTheField(t *testing.T) {
	t.Parallel()
	a := whsec('a', 32)
	tests := []struct{ name, channel, want string }{
		{"no secret", `{type: webhook, url: "https://h/x"}`,
			`policy: default.notify[0].secret: required for a webhook (or secrets, a list)`},
		{"empty secrets", `{type: webhook, url: "https://h/x", secrets: []}`,
			`policy: default.notify[0].secret: required for a webhook (or secrets, a list)`},
		{"secrets not a list", `{type: webhook, url: "https://h/x", secrets: s}`,
			`policy: default.notify[0].secrets: must be a list`},
		{"empty secret in secrets", `{type: webhook, url: "https://h/x", secrets: ["` + a + `", ""]}`,
			`policy: default.notify[0].secrets[1]: must not be empty`},
		{"bad key", `{type: webhook, url: "https://h/x", secrets: ["whsec_%%%"]}`,
			`policy: default.notify[0].secrets[0]: a whsec_ secret must be followed by its key in standard base64`},
		{"short key", `{type: webhook, url: "https://h/x", secret: "` + whsec('k', 16) + `"}`,
			`policy: default.notify[0].secret: a whsec_ secret's key must be 24 to 64 bytes, got 16`},
		{"bad reference", `{type: webhook, url: "https://h/x", secrets: ["file:secret"]}`,
			`policy: default.notify[0].secrets[0]: reference "file:secret": the path must be absolute`},
		{"too long", `{type: webhook, url: "https://h/x", secrets: ["` + strings.Repeat("k", 1025) + `"]}`,
			`policy: default.notify[0].secrets[0]: at most 1024 bytes, got 1025`},
		{"twice", `{type: webhook, url: "https://h/x", secret: "` + a + `", secrets: ["` + a + `"]}`,
			`policy: default.notify[0].secrets[0]: the same secret as secret`},
		{"too many", `{type: webhook, url: "https://h/x", secrets: [a1, a2, a3, a4, a5, a6, a7, a8, a9]}`,
			`policy: default.notify[0].secrets: at most 8 secrets, got 9`},
		{"secrets on ntfy", `{type: ntfy, url: "https://ntfy.sh", topic: t, secrets: [a]}`,
			`policy: default.notify[0].secrets: only a webhook has several secrets`},
		{"legacy on slack", `{type: slack, url: "https://h/x", legacySignature: true}`,
			`policy: default.notify[0].legacySignature: only a webhook's deliveries are signed`},
		{"unknown format", `{type: webhook, url: "https://h/x", secret: "` + a + `", format: cloudevent}`,
			`policy: default.notify[0].format: must be cloudevents, or absent for toolgate's envelope, got "cloudevent"`},
		{"format on ntfy", `{type: ntfy, url: "https://ntfy.sh", topic: t, format: cloudevents}`,
			`policy: default.notify[0].format: only a webhook's body has a format`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("default:\n  notify:\n    - " + tt.channel + "\n"))
			require.Error(t, err)
			assert.ErrorIs(t, err, machine.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), a, "a secret is not quoted back")
		})
	}
}

func TestResolveChannel_WebhookSecrets(t *testing.T) {
	a, b := whsec('a', 32), whsec('b', 32)
	t.Setenv("TOOLGATE_TEST_WHSEC", b)
	t.Setenv("TOOLGATE_TEST_BAD_WHSEC", "whsec_AAAA")
	file := filepath.Join(t.TempDir(), "hook-secret")
	require.NoError(t, os.WriteFile(file, []byte("whsec_????\n"), 0o600))

	ch := Channel{Type: ChannelWebhook, URL: "https://h/x", Secrets: []string{a, "env:TOOLGATE_TEST_WHSEC"}}
	got, err := ResolveChannel(ch)
	require.NoError(t, err)
	assert.Equal(t, []string{a, b}, got.Secrets)
	assert.Equal(t, []string{a, "env:TOOLGATE_TEST_WHSEC"}, ch.Secrets, "the channel given is left as it was")

	_, err = ResolveChannel(Channel{Type: ChannelWebhook, URL: "https://h/x", Secrets: []string{a, "env:TOOLGATE_TEST_BAD_WHSEC"}})
	assert.EqualError(t, err, "secrets[1]: policy: secret env:TOOLGATE_TEST_BAD_WHSEC: a whsec_ secret's key must be 24 to 64 bytes, got 3")
	_, err = ResolveChannel(Channel{Type: ChannelWebhook, URL: "https://h/x", Secret: "file:" + file})
	assert.ErrorContains(t, err, "secret: policy: secret file:"+file+": a whsec_ secret must be followed by its key in standard base64")
	_, err = ResolveChannel(Channel{Type: ChannelWebhook, URL: "https://h/x", Secrets: []string{"env:TOOLGATE_TEST_UNSET_VARIABLE"}})
	assert.EqualError(t, err, "secrets[0]: policy: secret env:TOOLGATE_TEST_UNSET_VARIABLE: the environment variable is not set")
}

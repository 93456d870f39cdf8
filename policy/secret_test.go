package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

func TestParse_SecretReferencesAreKeptAsWritten(t *testing.T) {
	doc, err := Parse([]byte(`default:
  notify:
    - {type: webhook, url: "https://hooks.example/toolgate", secret: "env:HOOK_SECRET"}
    - {type: slack, url: "file:/run/secrets/slack_url"}
    - {type: ntfy, url: "env:NTFY_URL", topic: approvals, secret: "file:/run/secrets/ntfy_token"}
`))
	require.NoError(t, err)
	assert.Equal(t, []Channel{
		{Type: ChannelWebhook, URL: "https://hooks.example/toolgate", Secret: "env:HOOK_SECRET"},
		{Type: ChannelSlack, URL: "file:/run/secrets/slack_url"},
		{Type: ChannelNtfy, URL: "env:NTFY_URL", Topic: "approvals", Secret: "file:/run/secrets/ntfy_token"},
	}, doc.Resolve("", "").Notify, "references are not resolved when a document is read")

	out, err := Marshal(doc)
	require.NoError(t, err)
	back, err := Parse(out)
	require.NoError(t, err)
	assert.Equal(t, doc, back, "nor when it is written")
}

func TestParse_RefusesBadSecretReferencesAndThePlaceholder(t *testing.T) {
	tests := []struct{ name, channel, want string }{
		{"env name empty", `{type: webhook, url: "https://h/x", secret: "env:"}`,
			`default.notify[0].secret: reference "env:": want env:NAME`},
		{"env name starts with a digit", `{type: webhook, url: "https://h/x", secret: "env:1PASSWORD"}`,
			`default.notify[0].secret: reference "env:1PASSWORD": want env:NAME`},
		{"env name with a dot", `{type: slack, url: "env:SLACK.URL"}`,
			`default.notify[0].url: reference "env:SLACK.URL": want env:NAME`},
		{"file path empty", `{type: webhook, url: "https://h/x", secret: "file:"}`,
			`default.notify[0].secret: reference "file:": want file:PATH, an absolute path`},
		{"file path relative", `{type: slack, url: "file:secrets/slack"}`,
			`default.notify[0].url: reference "file:secrets/slack": the path must be absolute`},
		{"file path not clean", `{type: webhook, url: "https://h/x", secret: "file:/run/../etc/shadow"}`,
			`default.notify[0].secret: reference "file:/run/../etc/shadow": the path must be clean`},
		{"redacted secret", `{type: webhook, url: "https://h/x", secret: "[redacted]"}`,
			`default.notify[0].secret: is "[redacted]", the placeholder ` + "`policy get`" + ` shows for a secret`},
		{"redacted slack url", `{type: slack, url: "[redacted]"}`,
			`default.notify[0].url: is "[redacted]", the placeholder`},
		{"a slack reference still takes no secret", `{type: slack, url: "env:SLACK_URL", secret: "env:X"}`,
			`default.notify[0].secret: a Slack incoming webhook takes no secret`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("default:\n  notify:\n    - " + tt.channel + "\n"))
			require.Error(t, err)
			assert.ErrorIs(t, err, machine.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestResolveSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	t.Setenv("TOOLGATE_TEST_SECRET", "from-env")
	t.Setenv("TOOLGATE_TEST_EMPTY", "")
	tokenFile := write("token", "from-file\r\n")
	emptyFile := write("empty", "\n")
	bigFile := write("big", strings.Repeat("x", 8<<10+1))

	for _, tt := range []struct {
		ref, want string
	}{
		{"s3cr3t", "s3cr3t"}, // not a reference: the value itself
		{"", ""},
		{"env:TOOLGATE_TEST_SECRET", "from-env"},
		{"file:" + tokenFile, "from-file"}, // without the trailing line break
	} {
		got, err := ResolveSecret(tt.ref)
		require.NoError(t, err, tt.ref)
		assert.Equal(t, tt.want, got, tt.ref)
	}

	for _, tt := range []struct {
		ref, want string
	}{
		{"env:TOOLGATE_TEST_UNSET_VARIABLE", "policy: secret env:TOOLGATE_TEST_UNSET_VARIABLE: the environment variable is not set"},
		{"env:TOOLGATE_TEST_EMPTY", "policy: secret env:TOOLGATE_TEST_EMPTY: the environment variable is empty"},
		{"file:" + emptyFile, "policy: secret file:" + emptyFile + ": the file is empty"},
		{"file:" + bigFile, "policy: secret file:" + bigFile + ": larger than 8192 bytes"},
		{"file:" + dir, "policy: secret file:" + dir + ": not a regular file"},
		{"file:" + filepath.Join(dir, "missing"), "policy: secret file:" + filepath.Join(dir, "missing") + ": no such file or directory"},
		{"file:relative", `policy: secret reference "file:relative": the path must be absolute`},
	} {
		_, err := ResolveSecret(tt.ref)
		require.Error(t, err, tt.ref)
		assert.Contains(t, err.Error(), tt.want)
		assert.NotContains(t, err.Error(), "xxxxxxxx", "an error never quotes a file's contents")
	}
}

func TestResolveChannel_ChecksWhatAReferenceLeadsTo(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_SLACK_URL", "https://hooks.slack.com/services/T/B/SECRET")
	t.Setenv("TOOLGATE_TEST_NOT_A_URL", "hooks.slack.com/services/T/B/SECRET")
	t.Setenv("TOOLGATE_TEST_LONG", strings.Repeat("k", 1025))
	t.Setenv("TOOLGATE_TEST_TOKEN", "tk_123")

	ch := Channel{Type: ChannelNtfy, URL: "https://ntfy.sh", Topic: "t", Secret: "env:TOOLGATE_TEST_TOKEN"}
	got, err := ResolveChannel(ch)
	require.NoError(t, err)
	assert.Equal(t, Channel{Type: ChannelNtfy, URL: "https://ntfy.sh", Topic: "t", Secret: "tk_123"}, got)
	assert.Equal(t, "env:TOOLGATE_TEST_TOKEN", ch.Secret, "the channel given is left as it was")

	got, err = ResolveChannel(Channel{Type: ChannelSlack, URL: "env:TOOLGATE_TEST_SLACK_URL"})
	require.NoError(t, err)
	assert.Equal(t, "https://hooks.slack.com/services/T/B/SECRET", got.URL)

	_, err = ResolveChannel(Channel{Type: ChannelSlack, URL: "env:TOOLGATE_TEST_NOT_A_URL"})
	require.Error(t, err)
	assert.Equal(t, `url: policy: secret env:TOOLGATE_TEST_NOT_A_URL: must be an absolute http or https URL, got scheme ""`, err.Error())

	_, err = ResolveChannel(Channel{Type: ChannelWebhook, URL: "https://h/x", Secret: "env:TOOLGATE_TEST_LONG"})
	require.Error(t, err)
	assert.Equal(t, "secret: policy: secret env:TOOLGATE_TEST_LONG: at most 1024 bytes, got 1025", err.Error())

	_, err = ResolveChannel(Channel{Type: ChannelWebhook, URL: "https://h/x", Secret: "env:TOOLGATE_TEST_UNSET_VARIABLE"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "secret: policy: secret env:TOOLGATE_TEST_UNSET_VARIABLE: the environment variable is not set")
}

func TestRedacted_HidesEverySecretValueAndKeepsReferences(t *testing.T) {
	doc, err := Parse([]byte(strings.Replace(notifyDocument, "teams:\n", `teams:
  refs:
    notify:
      - {type: webhook, url: "https://hooks.example/refs", secret: "env:HOOK_SECRET"}
      - {type: slack, url: "file:/run/secrets/slack_url"}
`, 1)))
	require.NoError(t, err)
	before, err := Marshal(doc)
	require.NoError(t, err)

	red := Redacted(doc)
	assert.Equal(t, []Channel{
		{Type: ChannelWebhook, URL: "https://hooks.example/toolgate", Secret: RedactedValue},
		{Type: ChannelSlack, URL: RedactedValue},
		{Type: ChannelNtfy, URL: "https://ntfy.sh", Topic: "team-approvals"},
	}, []Channel(red.Default.Notify))
	assert.Equal(t, []Channel{{Type: ChannelSlack, URL: RedactedValue}}, []Channel(red.Teams["finance"].Notify))
	assert.Equal(t, Channels{}, red.Teams["quiet"].Notify, "an explicit empty list stays one")
	assert.Equal(t, []Channel{
		{Type: ChannelWebhook, URL: "https://hooks.example/refs", Secret: "env:HOOK_SECRET"},
		{Type: ChannelSlack, URL: "file:/run/secrets/slack_url"},
	}, []Channel(red.Teams["refs"].Notify), "a reference is not the secret: shown as is")
	assert.Equal(t, "https://staging.toolgate.example/inbox", *red.Conversations["c1"].InboxURL)

	out, err := Marshal(red)
	require.NoError(t, err)
	for _, secret := range []string{"s3cr3t", "hooks.slack.com"} {
		assert.NotContains(t, string(out), secret)
	}
	after, err := Marshal(doc)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "the document redacted is left as it was")

	// Read redacted and set again, it is refused, naming every field that
	// would lose its secret, so no secret is replaced by the placeholder.
	_, err = Parse(out)
	require.Error(t, err)
	assert.ErrorIs(t, err, machine.ErrInvalid)
	var paths []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		require.ErrorAs(t, e, &fe)
		paths = append(paths, fe.Path)
	}
	assert.Equal(t, []string{"default.notify[0].secret", "default.notify[1].url", "teams.finance.notify[0].url"}, paths)

	// Decode, which does not validate, reads it back for showing.
	shown, err := Decode(out)
	require.NoError(t, err)
	assert.Equal(t, red, shown)
}

func TestRedacted_EmptyDocument(t *testing.T) {
	assert.Equal(t, &Document{}, Redacted(nil))
	assert.Equal(t, &Document{}, Redacted(&Document{}))
}

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

func TestParse_DecidersOfChannels(t *testing.T) {
	doc, err := Parse([]byte(`default:
  notify:
    - {type: ntfy, url: "https://ntfy.sh", topic: approvals, approver: alice}
    - {type: webhook, url: "https://h/x", secret: s3cret, approver: bob}
    - {type: slack, url: "https://hooks.slack.com/services/T/B/X", signingSecret: "8f742231b10e8888abcd99yyyzzz85a5", slackUsers: {U012ABCDEF: alice, W0XYZ: bob}}
    - {type: slack, url: "https://hooks.slack.com/services/T/B/Y", signingSecret: "env:SLACK_SIGNING_SECRET", slackUsers: {U1AB: carol}}
`))
	require.NoError(t, err)
	chans := doc.Default.Notify
	assert.Equal(t, "alice", chans[0].Approver)
	assert.Equal(t, "bob", chans[1].Approver)
	u, ok := chans[2].SlackUser("W0XYZ")
	assert.True(t, ok)
	assert.Equal(t, "bob", u)
	_, ok = chans[2].SlackUser("U999")
	assert.False(t, ok)

	c := doc.Clone()
	c.Default.Notify[2].SlackUsers["U012ABCDEF"] = "mallory"
	assert.Equal(t, "alice", doc.Default.Notify[2].SlackUsers["U012ABCDEF"], "Clone copies the mapping")

	red := Redacted(doc)
	assert.Equal(t, RedactedValue, red.Default.Notify[2].SigningSecret, "a signing secret is hidden")
	assert.Equal(t, "env:SLACK_SIGNING_SECRET", red.Default.Notify[3].SigningSecret, "a reference is shown")
	_, err = Parse(must(Marshal(red)))
	assert.ErrorContains(t, err, `default.notify[2].signingSecret: is "[redacted]"`)

	t.Setenv("TOOLGATE_TEST_SLACK_SIGNING", "resolved-secret")
	got, err := ResolveChannel(Channel{Type: ChannelSlack, URL: "https://h/x", SigningSecret: "env:TOOLGATE_TEST_SLACK_SIGNING", SlackUsers: map[string]string{"U1AB": "carol"}})
	require.NoError(t, err)
	assert.Equal(t, "resolved-secret", got.SigningSecret)
	_, err = ResolveChannel(Channel{Type: ChannelSlack, URL: "https://h/x", SigningSecret: "env:TOOLGATE_TEST_UNSET_SLACK"})
	assert.ErrorContains(t, err, "signingSecret: policy: secret env:TOOLGATE_TEST_UNSET_SLACK: the environment variable is not set")
}

func TestParse_DecidersRefusedNamingTheField(t *testing.T) {
	tests := []struct{ name, channel, want string }{
		{"approver on slack", `{type: slack, url: "https://h/x", approver: alice}`,
			`default.notify[0].approver: a Slack channel decides as the clicking user`},
		{"signing secret on ntfy", `{type: ntfy, url: "https://ntfy.sh", topic: t, signingSecret: x}`,
			`default.notify[0].signingSecret: only a Slack channel has a signing secret`},
		{"slack users on webhook", `{type: webhook, url: "https://h/x", secret: s, slackUsers: {U1AB: a}}`,
			`default.notify[0].slackUsers: only a Slack channel maps Slack users`},
		{"users without secret", `{type: slack, url: "https://h/x", slackUsers: {U1AB: a}}`,
			`default.notify[0].signingSecret: required with slackUsers`},
		{"secret without users", `{type: slack, url: "https://h/x", signingSecret: x}`,
			`default.notify[0].slackUsers: required with signingSecret`},
		{"bad slack id", `{type: slack, url: "https://h/x", signingSecret: x, slackUsers: {alice: alice}}`,
			`default.notify[0].slackUsers["alice"]: must be a Slack user id`},
		{"empty identity", `{type: slack, url: "https://h/x", signingSecret: x, slackUsers: {U1AB: ""}}`,
			`default.notify[0].slackUsers["U1AB"]: toolgate user id must be 1 to 256 bytes`},
		{"bad reference", `{type: slack, url: "https://h/x", signingSecret: "file:rel", slackUsers: {U1AB: a}}`,
			`default.notify[0].signingSecret: reference "file:rel": the path must be absolute`},
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

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An email channel names its SMTP server (smtp:// for STARTTLS, smtps://
// for TLS from the start), who it comes from and the addresses it goes
// to; a password comes with a username; no other channel says these.
func TestParse_EmailChannel(t *testing.T) {
	t.Parallel()
	d, err := Parse([]byte(`default:
  notify:
    - {type: email, url: "smtp://mail.example.com", from: "toolgate <toolgate@example.com>", to: [alice@example.com], username: toolgate, secret: "env:SMTP_PASSWORD"}
    - {type: email, url: "smtps://mail.example.com:2465", from: toolgate@example.com, to: [bob@example.com, "Carol <carol@example.com>"]}
`))
	require.NoError(t, err)
	for i, want := range []struct {
		addr     string
		implicit bool
	}{{"mail.example.com:587", false}, {"mail.example.com:2465", true}} {
		addr, implicit, err := d.Default.Notify[i].SMTPAddress()
		require.NoError(t, err)
		assert.Equal(t, want.addr, addr)
		assert.Equal(t, want.implicit, implicit)
	}
	red := Redacted(d)
	assert.Equal(t, "env:SMTP_PASSWORD", red.Default.Notify[0].Secret, "a reference stays readable")

	for _, tc := range []struct{ doc, want string }{
		{"{type: email, url: 'https://mail.example.com', from: a@example.com, to: [b@example.com]}", `default.notify[0].url: want smtp://HOST[:PORT] (STARTTLS) or smtps://HOST[:PORT] (TLS)`},
		{"{type: email, url: 'smtp://u:p@mail.example.com', from: a@example.com, to: [b@example.com]}", `without a path, query or user (give username and secret)`},
		{"{type: email, url: 'smtp://mail.example.com', to: [b@example.com]}", `default.notify[0].from: want the address messages come from`},
		{"{type: email, url: 'smtp://mail.example.com', from: a@example.com}", `default.notify[0].to: required: the addresses to send to`},
		{"{type: email, url: 'smtp://mail.example.com', from: a@example.com, to: [nobody]}", `default.notify[0].to[0]: want an address such as alice@example.com, got "nobody"`},
		{"{type: email, url: 'smtp://mail.example.com', from: a@example.com, to: [b@example.com, B@example.com]}", `default.notify[0].to[1]: "B@example.com" is listed twice`},
		{"{type: email, url: 'smtp://mail.example.com', from: a@example.com, to: [b@example.com], username: u}", `default.notify[0].secret: required with username`},
		{"{type: email, url: 'smtp://mail.example.com', from: a@example.com, to: [b@example.com], secret: p}", `default.notify[0].username: required with secret`},
		{"{type: ntfy, url: 'https://ntfy.sh', topic: t, to: [b@example.com]}", `default.notify[0].to: only an email channel has to`},
	} {
		_, err := Parse([]byte("default:\n  notify:\n    - " + tc.doc + "\n"))
		require.Error(t, err, tc.doc)
		assert.Contains(t, err.Error(), tc.want, tc.doc)
	}
	// Two email channels on one server are two channels when their
	// addresses differ.
	_, err = Parse([]byte(`default:
  notify:
    - {type: email, url: "smtp://mail.example.com", from: a@example.com, to: [b@example.com]}
    - {type: email, url: "smtp://mail.example.com", from: a@example.com, to: [c@example.com]}
`))
	assert.NoError(t, err)
}

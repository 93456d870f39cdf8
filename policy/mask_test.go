package policy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMasker_MasksSecretsByNameShapeAndPattern(t *testing.T) {
	m := Masker{patterns: []string{"$.headers.X-Custom", "*pin*", "$.*.code"}}
	for _, c := range []struct{ name, in, want string }{
		{"nothing secret", `{"query":"weather in Paris","max_tokens":100}`, ``},
		{"secret names, any depth, any case",
			`{"Authorization":"Basic abc","nested":{"api-key":"k1","list":[{"password":"p"}]},"token":null}`,
			`{"Authorization":"[redacted]","nested":{"api-key":"[redacted]","list":[{"password":"[redacted]"}]},"token":null}`},
		{"shapes inside a command line",
			`{"command":"curl -H 'Authorization: Bearer abcdefgh12345678' https://x?api_key=zzz9 && echo sk-abcdefghijklmnopqrstuv"}`,
			`{"command":"curl -H 'Authorization: Bearer [redacted]' https://x?api_key=[redacted] \u0026\u0026 echo [redacted]"}`},
		{"a private key",
			`{"key":"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"}`,
			`{"key":"[redacted]"}`},
		{"the policy's patterns: a path, a key glob, a path glob",
			`{"headers":{"x-custom":"v","other":"o"},"user_pin":1234,"a":{"code":"c"},"code":"top"}`,
			`{"a":{"code":"[redacted]"},"code":"top","headers":{"other":"o","x-custom":"[redacted]"},"user_pin":"[redacted]"}`},
		{"not JSON", `nope`, ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, masked := m.Mask(json.RawMessage(c.in))
			if c.want == "" {
				assert.False(t, masked)
				assert.Equal(t, c.in, string(got), "returned as it is")
				return
			}
			assert.True(t, masked)
			assert.JSONEq(t, c.want, string(got))
		})
	}
}

func TestUnmaskEdit_KeepsWhatTheApproverLeftMasked(t *testing.T) {
	original := json.RawMessage(`{"url":"https://x","headers":{"Authorization":"Bearer s3cr3t-v4lue-123"},"command":"deploy --token=abc123 now","n":1}`)
	shown, masked := Masker{}.Mask(original)
	assert.True(t, masked)
	// The approver changes the URL, leaves the masked header and command as shown.
	var edit map[string]any
	assert.NoError(t, json.Unmarshal(shown, &edit))
	edit["url"] = "https://y"
	data, _ := json.Marshal(edit)
	assert.JSONEq(t, `{"url":"https://y","headers":{"Authorization":"Bearer s3cr3t-v4lue-123"},"command":"deploy --token=abc123 now","n":1}`,
		string(UnmaskEdit(data, original)))

	// A command the approver rewrote keeps their text, placeholder and all.
	assert.JSONEq(t, `{"command":"deploy --token=[redacted] later"}`,
		string(UnmaskEdit(json.RawMessage(`{"command":"deploy --token=[redacted] later"}`), original)))
	// An edit with no placeholder is left alone.
	assert.Equal(t, `{"n":2}`, string(UnmaskEdit(json.RawMessage(`{"n":2}`), original)))
}

// TestEngineMasker_TakesEveryScopesPatterns: a call is masked with the
// redact patterns of the default scope, its team's and its
// conversation's, as Resolve adds them up, and no other team's.
func TestEngineMasker_TakesEveryScopesPatterns(t *testing.T) {
	doc, err := Parse([]byte(`
default: {redact: [a]}
teams:
  ops: {redact: [b]}
  other: {redact: [c]}
conversations:
  conv-1: {redact: [d]}
`))
	assert.NoError(t, err)
	e, err := NewEngine(doc, nil, nil)
	assert.NoError(t, err)
	args := json.RawMessage(`{"a":1,"b":2,"c":3,"d":4}`)
	for _, c := range []struct{ team, conv, want string }{
		{"", "", `{"a":"[redacted]","b":2,"c":3,"d":4}`},
		{"ops", "", `{"a":"[redacted]","b":"[redacted]","c":3,"d":4}`},
		{"ops", "conv-1", `{"a":"[redacted]","b":"[redacted]","c":3,"d":"[redacted]"}`},
		{"nobody", "conv-1", `{"a":"[redacted]","b":2,"c":3,"d":"[redacted]"}`},
	} {
		got, _ := e.Masker(c.team, c.conv).Mask(args)
		assert.JSONEq(t, c.want, string(got), "team %q conversation %q", c.team, c.conv)
		assert.Equal(t, e.Resolve(c.team, c.conv).Redact, e.Masker(c.team, c.conv).patterns, "as Resolve has them")
	}
}

// BenchmarkEngineMasker: the relay takes a masker for every revision it
// publishes.
func BenchmarkEngineMasker(b *testing.B) {
	doc, err := Parse([]byte("default: {redact: [a], requiresApprovalTools: [x], readOnlyTools: [y]}\nteams: {ops: {redact: [b]}}"))
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(doc, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = e.Masker("ops", "conv-1")
	}
}

// TestEngineMasker_RevealIsTheNarrowestScopes: who may reveal a call's
// arguments is admin where no scope says, the narrowest scope's list
// where one does (an empty one: nobody), and a role that reads calls
// unmasked anyway is refused in a document.
func TestEngineMasker_RevealIsTheNarrowestScopes(t *testing.T) {
	doc, err := Parse([]byte("default: {requiresApprovalTools: all}\nteams: {sec: {reveal: [admin, approver]}, ops: {reveal: []}}\n"))
	assert.NoError(t, err)
	e, err := NewEngine(doc, nil, nil)
	assert.NoError(t, err)
	assert.Equal(t, []string{"admin"}, e.Masker("", "c").Reveal())
	assert.Equal(t, []string{"admin", "approver"}, e.Masker("sec", "c").Reveal())
	assert.Empty(t, e.Masker("ops", "c").Reveal())
	assert.Equal(t, []string{"admin"}, Masker{}.Reveal(), "without a policy")

	_, err = Parse([]byte("default: {reveal: [admin, agent]}\n"))
	assert.ErrorContains(t, err, `default.reveal[1]: must be admin, approver or viewer, got "agent"`)
}

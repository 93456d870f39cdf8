package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// fence is a fenced code block of a markdown page.
type fence struct {
	lang, text string
	line       int
}

func fences(t *testing.T, page []byte) []fence {
	t.Helper()
	var out []fence
	var cur *fence
	sc := bufio.NewScanner(bytes.NewReader(page))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &fence{lang: strings.TrimPrefix(line, "```"), line: n}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	require.Nil(t, cur, "an unclosed code block")
	return out
}

// docsURL is the server docs/authzen.md's commands reach.
const docsURL = "http://127.0.0.1:8080"

// TestAuthZEN_DocsWorkedExampleRuns: docs/authzen.md's worked example,
// run with curl against a toolgate serving the page's policy: each
// command's answer is the JSON the page shows under it (its times aside,
// which differ each run), and its closing words about prod and read_file
// hold.
func TestAuthZEN_DocsWorkedExampleRuns(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "authzen.md"))
	require.NoError(t, err)
	blocks := fences(t, page)
	var policyDoc string
	for _, b := range blocks {
		if b.lang == "yaml" {
			policyDoc = b.text
		}
	}
	require.NotEmpty(t, policyDoc, "the page's policy")
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "http"}, Policy: policyDoc,
		Tokens: "agent-token-000000001 deploy-bot agent\nalice-token-000000001 alice approver\n"})
	h := &harness{t: t, url: g.HTTPURL}

	ran := 0
	for i, b := range blocks {
		if b.lang != "sh" {
			continue
		}
		cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", strings.ReplaceAll(b.text, docsURL, g.HTTPURL))
		cmd.Env = append(os.Environ(), "AGENT_TOKEN=agent-token-000000001", "APPROVER_TOKEN=alice-token-000000001")
		out, err := cmd.Output()
		require.NoError(t, err, "docs/authzen.md:%d: %s", b.line, out)
		ran++
		if i+1 >= len(blocks) || blocks[i+1].lang != "json" {
			assert.Empty(t, out, "docs/authzen.md:%d: the page shows no answer", b.line)
			continue
		}
		want := strings.ReplaceAll(blocks[i+1].text, docsURL, g.HTTPURL)
		assert.JSONEq(t, timeless(t, []byte(want)), timeless(t, out), "docs/authzen.md:%d", b.line)
	}
	assert.Equal(t, 5, ran, "the page's commands")

	for _, c := range []struct{ tool, args, reason, message string }{
		{"deploy", `{"env":"prod"}`, wire.AccessPolicyDenied, `rules.deny "deploy(prod)" (default)`},
		{"read_file", `{"path":"notes.md"}`, wire.AccessAllowed, "readOnlyTools (default)"},
	} {
		var d wire.AccessDecision
		require.Equal(t, 200, h.do("POST", wire.AuthZENEvaluationPath, "agent-token-000000001", wire.AccessEvaluationRequest{
			Subject: &wire.AuthZENSubject{Type: "agent", ID: "deploy-bot"}, Action: &wire.AuthZENAction{Name: c.tool},
			Resource: &wire.AuthZENResource{Type: wire.AuthZENToolCall, ID: "x-" + c.tool, Properties: json.RawMessage(`{"arguments":` + c.args + `}`)},
		}, &d))
		assert.Equal(t, c.reason == wire.AccessAllowed, d.Decision, c.tool)
		assert.Equal(t, c.reason, d.Context.Reason, c.tool)
		assert.Equal(t, c.message, d.Context.Message, c.tool)
	}
}

// timeless is a JSON answer with its expires_at, which the page shows
// as of one day, set to "".
func timeless(t *testing.T, data []byte) string {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(data, &v), "%s", data)
	if c, ok := v["context"].(map[string]any); ok && c["expires_at"] != nil {
		c["expires_at"] = ""
	}
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return string(out)
}

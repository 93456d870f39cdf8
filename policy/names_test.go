package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEngine_NamedToolAndTeam(t *testing.T) {
	doc, err := Parse([]byte(`default:
  requiresApprovalTools: [web_search, mcp__github]
  readOnlyTools: [read_file]
  editTools: [patch_file]
  toolSpecificDelays: {slow_report: 2000}
  describe: {send_email: 'mail {{.to}}'}
  matchArgument: {deploy: env}
  rules:
    deny: ["rm_rf", "mcp__jira__*"]
    ask: ["Bash(git push *)"]
    allow: ["mcp__slack__post"]
teams:
  finance:
    rules:
      allow: [transfer_funds]
conversations:
  c1:
    readOnlyTools: [conversation_only]
`))
	require.NoError(t, err)
	e, err := NewEngine(doc, nil, nil)
	require.NoError(t, err)

	for tool, want := range map[string]string{
		"web_search":          "web_search",
		"read_file":           "read_file",
		"patch_file":          "patch_file",
		"slow_report":         "slow_report",
		"send_email":          "send_email",
		"deploy":              "deploy",
		"rm_rf":               "rm_rf",
		"transfer_funds":      "transfer_funds",    // a team's rule
		"conversation_only":   "conversation_only", // a conversation's
		"mcp__slack__post":    "mcp__slack__post",
		"mcp__github__create": "mcp__github", // the server, not the tool: agents choose the tool's part
		"mcp__jira__anything": "mcp__jira",
		"Bash":                "Bash", // Claude Code's built-in tools, named or not
		"Read":                "Read",
		"WebFetch":            "WebFetch",
		"NotebookEdit":        "NotebookEdit",
	} {
		got, ok := e.NamedTool(tool)
		assert.True(t, ok, tool)
		assert.Equal(t, want, got, tool)
	}
	for _, tool := range []string{"web_search2", "mcp__slack__other", "mcp__githubx__y", "x", ""} {
		got, ok := e.NamedTool(tool)
		assert.False(t, ok, tool)
		assert.Empty(t, got, tool)
	}

	assert.True(t, e.NamedTeam("finance"))
	assert.False(t, e.NamedTeam("research"))
	assert.False(t, e.NamedTeam(""))

	// A new document, a new vocabulary.
	doc, err = Parse([]byte("teams:\n  research:\n    readOnlyTools: [search_papers]\n"))
	require.NoError(t, err)
	require.NoError(t, e.SetDocument(doc))
	_, ok := e.NamedTool("web_search")
	assert.False(t, ok)
	_, ok = e.NamedTool("search_papers")
	assert.True(t, ok)
	assert.True(t, e.NamedTeam("research"))
	assert.False(t, e.NamedTeam("finance"))
}

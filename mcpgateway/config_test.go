package mcpgateway_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/mcpgateway"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := mcpgateway.ParseConfig([]byte(`
servers:
  fs:
    command: [npx, -y, "@modelcontextprotocol/server-filesystem", /home/me/project]
    env: {LOG_LEVEL: debug}
  desktop-style:
    command: uvx
    args: [mcp-server-git]
  github:
    url: https://api.githubcopilot.com/mcp/
    headers: {Authorization: "Bearer ${GITHUB_TOKEN}"}
`))
	require.NoError(t, err)
	require.Len(t, cfg.Servers, 3)
	assert.Equal(t, mcpgateway.Argv{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me/project"}, cfg.Servers["fs"].Command)
	assert.Equal(t, mcpgateway.Argv{"uvx"}, cfg.Servers["desktop-style"].Command)
	assert.Equal(t, []string{"mcp-server-git"}, cfg.Servers["desktop-style"].Args)
	assert.Equal(t, "https://api.githubcopilot.com/mcp/", cfg.Servers["github"].URL)

	json, err := mcpgateway.ParseConfig([]byte(`{"servers": {"fs": {"command": ["server"], "env": {"A": "1"}}}}`))
	require.NoError(t, err, "JSON is YAML too")
	assert.Equal(t, "1", json.Servers["fs"].Env["A"])

	for doc, want := range map[string]string{
		``:                  "servers: name at least one MCP server",
		`servers: {}`:       "servers: name at least one MCP server",
		`servers: {fs: {}}`: "servers.fs: give a command",
		`servers: {fs: {command: [a], url: "http://x"}}`: "command or url, not both",
		`servers: {fs: {url: "ftp://x"}}`:                "servers.fs.url: want an http or https URL",
		`servers: {fs: {url: "http://x", env: {A: b}}}`:  "env, args and dir are for a command",
		`servers: {fs: {command: [a], headers: {A: b}}}`: "servers.fs.headers: only for a url",
		`servers: {my__fs: {command: [a]}}`:              `a server's name is 1 to 32 letters`,
		`servers: {_fs: {command: [a]}}`:                 `a server's name`,
		`servers: {fs: {command: [a], cmd: b}}`:          "field cmd not found",
		`servers: {fs: {command: [""]}}`:                 "the program is empty",
	} {
		_, err := mcpgateway.ParseConfig([]byte(doc))
		assert.ErrorIs(t, err, machine.ErrInvalid, doc)
		assert.ErrorContains(t, err, want, doc)
	}
}

func TestToolName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "mcp__github__create_issue", mcpgateway.ToolName("github", "create_issue"))
	dotted := mcpgateway.ToolName("fs", "files.read")
	assert.True(t, machine.ValidToolName(dotted), dotted)
	assert.True(t, strings.HasPrefix(dotted, "mcp__fs__files_read_"), dotted)
	assert.NotEqual(t, dotted, mcpgateway.ToolName("fs", "files/read"), "two names a character apart stay apart")
	long := mcpgateway.ToolName("fs", strings.Repeat("x", 200))
	assert.True(t, machine.ValidToolName(long), long)
	assert.Len(t, long, 128)
}

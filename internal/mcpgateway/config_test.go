package mcpgateway_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/mcpgateway"
	"github.com/toolgate/toolgate/machine"
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
		`servers: {fs: {command: [a], url: "http://x"}}`:  "command or url, not both",
		`servers: {fs: {url: "ftp://x"}}`:                 "servers.fs.url: want an http or https URL",
		`servers: {fs: {url: "http://x", env: {A: b}}}`:   "env, args and dir are for a command",
		`servers: {fs: {command: [a], headers: {A: b}}}`:  "servers.fs.headers: only for a url",
		`servers: {my__fs: {command: [a]}}`:               `a server's name is 1 to 32 letters`,
		`servers: {_fs: {command: [a]}}`:                  `a server's name`,
		`servers: {fs: {command: [a], cmd: b}}`:           `line 1: servers.fs: unknown field "cmd": a server has command, args`,
		"servers:\n  fs:\n    command: [a]\n    cmd: b\n": `line 4: servers.fs: unknown field "cmd"`,
		"servers:\n  fs:\n    env: [A=b]\n":               "line 3: servers.fs.env: want a map of names to values",
		"servers:\n  fs:\n    args: 3\n":                  "line 3: servers.fs.args: want a list of arguments",
		"servers:\n  fs: [a]\n":                           "line 2: servers.fs: a server is a map",
		"server:\n  fs: {command: a}\n":                   `line 1: unknown field "server": the config has servers only`,
		`servers: {fs: {command: [""]}}`:                  "the program is empty",
	} {
		_, err := mcpgateway.ParseConfig([]byte(doc))
		assert.ErrorIs(t, err, machine.ErrInvalid, doc)
		assert.ErrorContains(t, err, want, doc)
		assert.NotContains(t, err.Error(), "mcpgateway.", "an error names the config's fields, not Go's types")
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

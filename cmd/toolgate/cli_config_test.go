package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
)

// isolateTests makes the tests read nobody's own setup: no config file,
// no NATS context the nats CLI selected, no NATS_URL. TestMain runs it
// before any test (and the toolgate processes tests start inherit it), as
// a test that reads them gives its own environment to runWith instead.
func isolateTests() {
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(os.TempDir(), fmt.Sprintf("toolgate-test-no-config-%d", os.Getpid())))
	for _, v := range []string{"NATS_URL", "NATS_CREDS", "NATS_CONTEXT", "TOOLGATE_CONFIG"} {
		os.Unsetenv(v)
	}
}

// cliEnv runs a command in-process with env as its whole environment.
func cliEnv(t *testing.T, env map[string]string, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	code := runWith(t.Context(), args, lookup, &stdout, &stderr)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// unreachable is a NATS URL nothing answers on: a verb told to use it
// fails, saying so.
const unreachable = "nats://127.0.0.1:1"

// precedenceEnv is a toolgate to connect to, the credentials that may
// and may not list credentials there, and a home to keep config files in.
type precedenceEnv struct {
	url, admin, agent, home string
}

func newPrecedenceEnv(t *testing.T) precedenceEnv {
	g := startToolgate(t, "")
	data := servetest.DataDir(t, g)
	return precedenceEnv{url: g, admin: server.CredsPath(data, "admin"), agent: server.CredsPath(data, "agent"), home: t.TempDir()}
}

// config writes a config file in the default place under home.
func (p precedenceEnv) config(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(p.home, "toolgate", "config.yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestCLI_ConfigPrecedence: a flag after the verb beats the same flag
// before it, which beats TOOLGATE_<FLAG>, which beats NATS_URL and
// NATS_CREDS, which beat the config file. `creds list` tells the three
// outcomes apart: listed (the admin's credential at toolgate's address),
// forbidden (an agent's credential), unreachable (the wrong address).
func TestCLI_ConfigPrecedence(t *testing.T) {
	t.Parallel()
	p := newPrecedenceEnv(t)
	noData := t.TempDir() // no admin credential to fall back on
	yaml := func(url, creds string) string { return fmt.Sprintf("nats: %s\nnats-creds: %s\n", url, creds) }
	const (
		listed     = "listed"
		forbidden  = "forbidden"
		notServing = "is toolgate serving there?"
	)
	for _, tc := range []struct {
		name   string
		config string
		env    map[string]string
		args   []string
		want   string
	}{
		{name: "config file", config: yaml(p.url, p.admin), want: listed},
		{name: "config file, its credential", config: yaml(p.url, p.agent), want: forbidden},
		{name: "config file, its address", config: yaml(unreachable, p.admin), want: notServing},
		{name: "NATS_URL beats the config file", config: yaml(unreachable, p.admin),
			env: map[string]string{"NATS_URL": p.url}, want: listed},
		{name: "NATS_CREDS beats the config file", config: yaml(p.url, p.agent),
			env: map[string]string{"NATS_CREDS": p.admin}, want: listed},
		{name: "TOOLGATE_NATS beats NATS_URL", config: yaml(unreachable, p.admin),
			env: map[string]string{"NATS_URL": unreachable, "TOOLGATE_NATS": p.url}, want: listed},
		{name: "TOOLGATE_NATS_CREDS beats NATS_CREDS",
			env: map[string]string{"NATS_URL": p.url, "NATS_CREDS": p.agent, "TOOLGATE_NATS_CREDS": p.admin}, want: listed},
		{name: "a flag before the verb beats TOOLGATE_NATS", config: yaml(unreachable, p.admin),
			env: map[string]string{"TOOLGATE_NATS": unreachable}, args: []string{"--nats", p.url, "creds", "list"}, want: listed},
		{name: "a flag after the verb beats the same before it",
			args: []string{"--nats=" + p.url, "--nats-creds", p.agent, "creds", "list", "--nats-creds", p.admin}, want: listed},
		{name: "a flag after the verb beats everything", config: yaml(unreachable, p.agent),
			env:  map[string]string{"NATS_URL": unreachable, "TOOLGATE_NATS": unreachable, "NATS_CREDS": p.agent, "TOOLGATE_NATS_CREDS": p.agent},
			args: []string{"creds", "list", "--nats", p.url, "--nats-creds", p.admin}, want: listed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			env := map[string]string{"XDG_CONFIG_HOME": home, "TOOLGATE_DATA": noData}
			for k, v := range tc.env {
				env[k] = v
			}
			if tc.config != "" {
				precedenceEnv{home: home}.config(t, tc.config)
			}
			args := tc.args
			if args == nil {
				args = []string{"creds", "list"}
			}
			r := cliEnv(t, env, args...)
			switch tc.want {
			case listed:
				require.Equal(t, exitOK, r.code, r.stderr)
				assert.Regexp(t, `(?m)^admin\s+admin\s`, r.stdout)
			default:
				assert.Equal(t, exitRefused, r.code, r.stdout)
				assert.Contains(t, r.stderr, tc.want)
			}
		})
	}
}

// TestCLI_ConfigFile: where the config file is, what it may hold, and its
// paths.
func TestCLI_ConfigFile(t *testing.T) {
	t.Parallel()
	p := newPrecedenceEnv(t)
	noData := t.TempDir()

	// --config (after the verb, before it, or TOOLGATE_CONFIG) names the
	// file instead of the default one, which is then not read.
	elsewhere := filepath.Join(t.TempDir(), "toolgate.yaml")
	require.NoError(t, os.WriteFile(elsewhere, fmt.Appendf(nil, "nats: %s\nnats-creds: %s\ndata: %s\n", p.url, p.admin, noData), 0o600))
	p.config(t, "nats: "+unreachable+"\n")
	env := map[string]string{"XDG_CONFIG_HOME": p.home}
	for _, args := range [][]string{
		{"creds", "list", "--config", elsewhere},
		{"--config", elsewhere, "creds", "list"},
	} {
		r := cliEnv(t, env, args...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r.stderr)
	}
	r := cliEnv(t, map[string]string{"XDG_CONFIG_HOME": p.home, "TOOLGATE_CONFIG": elsewhere}, "creds", "list")
	require.Equal(t, exitOK, r.code, r.stderr)

	// Without $XDG_CONFIG_HOME, the default is under $HOME/.config.
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".config", "toolgate"), 0o700))
	require.NoError(t, os.Rename(elsewhere, filepath.Join(home, ".config", "toolgate", "config.yaml")))
	r = cliEnv(t, map[string]string{"HOME": home}, "creds", "list")
	require.Equal(t, exitOK, r.code, r.stderr)

	// Its paths may start with ~ and hold $VARIABLES, and are relative to
	// the file's directory.
	dir := t.TempDir()
	creds, err := os.ReadFile(p.admin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "me.creds"), creds, 0o600))
	for _, creds := range []string{"me.creds", "./me.creds", "$CREDS_DIR/me.creds", "~/me.creds"} {
		path := filepath.Join(dir, "config.yaml")
		require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "nats: %s\nnats-creds: %s\n", p.url, creds), 0o600))
		r := cliEnv(t, map[string]string{"HOME": dir, "CREDS_DIR": dir, "TOOLGATE_DATA": noData}, "creds", "list", "--config", path)
		assert.Equal(t, exitOK, r.code, "nats-creds: %s: %s", creds, r.stderr)
	}

	// What is wrong with it is said, naming the file.
	bad := filepath.Join(t.TempDir(), "config.yaml")
	for _, tc := range []struct{ content, want string }{
		{"nats: " + p.url + "\nnast-creds: x\n", `line 2: unknown key "nast-creds"`},
		{"replicas: 3\n", `unknown key "replicas"`},
		{"- nats\n", "want a mapping"},
		{"nats: [a, b]\n", "nats: want a string"},
		{"nats: a\nnats: b\n", "nats given twice"},
		{"nats: \"\n", "yaml"},
	} {
		require.NoError(t, os.WriteFile(bad, []byte(tc.content), 0o600))
		r := cliEnv(t, nil, "pending", "--config", bad)
		assert.Equal(t, exitUsage, r.code, "%q: %s", tc.content, r.stderr)
		assert.Contains(t, r.stderr, "config file "+bad, "%q", tc.content)
		assert.Contains(t, r.stderr, tc.want, "%q", tc.content)
	}
	r = cliEnv(t, nil, "pending", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "missing.yaml: no such file")
	// A key left empty sets nothing.
	require.NoError(t, os.WriteFile(bad, []byte("nats:\n"), 0o600))
	r = cliEnv(t, map[string]string{"TOOLGATE_NATS": p.url, "TOOLGATE_NATS_CREDS": p.admin}, "creds", "list", "--config", bad)
	assert.Equal(t, exitOK, r.code, r.stderr)

	// docs/cli.md's example is a config file.
	doc, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "## The CLI's connection and config file")
	require.True(t, ok, "docs/cli.md: the CLI's connection and config file section")
	_, example, ok := strings.Cut(section, "```yaml\n")
	require.True(t, ok)
	example, _, _ = strings.Cut(example, "```")
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(example), 0o600))
	values, err := loadConfig(path, func(k string) (string, bool) { return map[string]string{"HOME": "/home/alice"}[k], k == "HOME" })
	require.NoError(t, err, "docs/cli.md's config example")
	assert.Equal(t, map[string]string{"nats": "nats://toolgate.example.com:4222",
		"nats-creds": "/home/alice/.config/toolgate/alice.creds", "data": "/var/lib/toolgate"}, values)

	// mcp-gateway's own --config names its MCP servers: toolgate's config
	// file is given before the verb.
	require.NoError(t, os.WriteFile(bad, []byte("bogus: 1\n"), 0o600))
	r = cliEnv(t, nil, "--config", bad, "mcp-gateway", "--config", filepath.Join(t.TempDir(), "servers.yaml"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "config file "+bad+": line 1: unknown key \"bogus\"")
	r = cliEnv(t, nil, "mcp-gateway", "--config", bad)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "toolgate mcp-gateway: --config: ")
	assert.NotContains(t, r.stderr, "config file "+bad)

	// serve reads no config file: what a person's CLI reaches is not where
	// a server runs.
	p.config(t, "nats: "+unreachable+"\nbogus: 1\n")
	var stderr bytes.Buffer
	fs, cfg := newServeFlags(&stderr)
	require.NoError(t, parseFlagsFrom(fs, nil, nil, func(k string) (string, bool) {
		v, ok := map[string]string{"XDG_CONFIG_HOME": p.home, "NATS_URL": unreachable}[k]
		return v, ok
	}))
	assert.Empty(t, cfg.Conn.URLs, "serve runs its embedded server whatever the CLI's config or NATS_URL say")
}

// TestCLI_GlobalFlagsBeforeTheVerb: `toolgate --nats URL --nats-creds F
// pending` is `toolgate pending --nats URL --nats-creds F`, subcommands
// and all.
func TestCLI_GlobalFlagsBeforeTheVerb(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "")
	_, err := agent(t, url).Submit(t.Context(), bashCall("conv-global", "call", "ls"))
	require.NoError(t, err)
	creds := server.CredsPath(servetest.DataDir(t, url), "admin")
	noData := t.TempDir()

	after := cli(t, "", "pending", "--json", "--nats", url, "--nats-creds", creds, "--data", noData)
	require.Equal(t, exitOK, after.code, after.stderr)
	require.Contains(t, after.stdout, "conv-global.call")
	before := cli(t, "", "--nats", url, "--nats-creds", creds, "--data", noData, "pending", "--json")
	assert.Equal(t, after, before)
	before = cli(t, "", "--nats="+url, "-nats-creds="+creds, "pending", "--data", noData, "--json")
	assert.Equal(t, after, before)

	// A subcommand's verb, and flags of the verb's own after it.
	r := cli(t, "", "--nats", url, "--nats-creds", creds, "policy", "get", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "{"), r.stdout)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", "pending"}, "flag provided but not defined: -json: before the command, toolgate takes only --config, --context, --data, --nats"},
		{[]string{"--nats", url}, "missing the command"},
		{[]string{"--context", "prod", "serve"}, "--context, given before the command, is not a flag of serve"},
		{[]string{"--nats-creds", creds, "policy", "validate", "x.yaml"}, "--nats-creds, given before the command, is not a flag of policy validate"},
	} {
		r := cli(t, "", tc.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
}

// TestCLI_NATSContextsAsTheNATSCLIHasThem: a context --context or
// NATS_CONTEXT names, or else the one `nats context select` chose, gives
// the server and credential nothing else gave.
func TestCLI_NATSContextsAsTheNATSCLIHasThem(t *testing.T) {
	t.Parallel()
	p := newPrecedenceEnv(t)
	noData := t.TempDir()
	natsDir := filepath.Join(p.home, "nats")
	require.NoError(t, os.MkdirAll(filepath.Join(natsDir, "context"), 0o700))
	saveContext := func(name, url, creds string) {
		require.NoError(t, os.WriteFile(filepath.Join(natsDir, "context", name+".json"),
			fmt.Appendf(nil, `{"description":"","url":%q,"token":"","user":"","password":"","creds":%q,"nkey":""}`, url, creds), 0o600))
	}
	saveContext("admin", p.url, p.admin)
	saveContext("agent", p.url, p.agent)
	saveContext("elsewhere", unreachable, p.admin)
	saveContext("expanded", p.url, "$TOOLGATE_TEST_CREDS")
	require.NoError(t, os.WriteFile(filepath.Join(natsDir, "context.txt"), []byte("admin\n"), 0o600))
	env := func(more ...string) map[string]string {
		e := map[string]string{"XDG_CONFIG_HOME": p.home, "TOOLGATE_DATA": noData}
		for i := 0; i+1 < len(more); i += 2 {
			e[more[i]] = more[i+1]
		}
		return e
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		ok   bool
		want string
	}{
		{name: "the selected context", env: env(), ok: true},
		{name: "NATS_CONTEXT beats the selected one", env: env("NATS_CONTEXT", "agent"), want: "forbidden"},
		{name: "--context beats NATS_CONTEXT", env: env("NATS_CONTEXT", "agent"), args: []string{"--context", "admin"}, ok: true},
		{name: "--context before the verb", env: env(), args: []string{"--context=agent"}, want: "forbidden"},
		{name: "a credential replaces the context's", env: env("NATS_CONTEXT", "agent", "NATS_CREDS", p.admin), ok: true},
		{name: "--nats replaces the context's server", env: env("NATS_CONTEXT", "elsewhere"), args: []string{"--nats", p.url}, ok: true},
		{name: "the context's server", env: env("NATS_CONTEXT", "elsewhere"), want: `is toolgate serving there?`},
		{name: "the context's server, named", env: env("NATS_CONTEXT", "elsewhere"), want: `from the NATS context "elsewhere")`},
		{name: "a context's credential path is expanded", env: env("NATS_CONTEXT", "expanded", "TOOLGATE_TEST_CREDS", p.admin), ok: true},
		{name: "an unknown context", env: env("NATS_CONTEXT", "nope"), want: `NATS context "nope": no such context: no ` + filepath.Join(natsDir, "context", "nope.json")},
		{name: "no context's name", env: env(), args: []string{"--context", "../admin"}, want: "not a context's name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"creds", "list"}
			if len(tc.args) > 0 && strings.HasPrefix(tc.args[0], "--context=") {
				args = append(tc.args, args...)
			} else {
				args = append(args, tc.args...)
			}
			r := cliEnv(t, tc.env, args...)
			if tc.ok {
				require.Equal(t, exitOK, r.code, r.stderr)
				assert.Regexp(t, `(?m)^admin\s+admin\s`, r.stdout)
				return
			}
			assert.Equal(t, exitRefused, r.code, r.stdout)
			assert.Contains(t, r.stderr, tc.want)
		})
	}

	// A selected context that is gone is an error naming context.txt; with
	// a credential and a server given, no context is needed or read.
	sel := filepath.Join(t.TempDir(), "xdg")
	require.NoError(t, os.MkdirAll(filepath.Join(sel, "nats"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(sel, "nats", "context.txt"), []byte("gone"), 0o600))
	r := cliEnv(t, map[string]string{"XDG_CONFIG_HOME": sel, "TOOLGATE_DATA": noData}, "creds", "list", "--nats", p.url)
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, `NATS context "gone" selected in `+filepath.Join(sel, "nats", "context.txt"))
	r = cliEnv(t, map[string]string{"XDG_CONFIG_HOME": sel}, "creds", "list", "--nats", p.url, "--nats-creds", p.admin)
	assert.Equal(t, exitOK, r.code, r.stderr)
}

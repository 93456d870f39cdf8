package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completionScript writes `toolgate completion SHELL` to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	r := cli(t, "", "completion", shell)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, r.stderr)
	path := filepath.Join(t.TempDir(), "toolgate."+shell)
	require.NoError(t, os.WriteFile(path, []byte(r.stdout), 0o600))
	return path
}

// TestCompletion_Commands: completion knows every verb, its subcommands
// and flags from the verb table and the verbs' own flag sets, and every
// verb's summary.
func TestCompletion_Commands(t *testing.T) {
	t.Parallel()
	cmds := completionCommands()
	byKey := map[string]complCmd{}
	for _, c := range cmds {
		byKey[c.key()] = c
	}
	var verbs []string
	for _, v := range verbTable() {
		verbs = append(verbs, v.name)
	}
	slices.Sort(verbs)
	assert.Equal(t, verbs, byKey[""].subs, "toolgate's verbs")
	for _, v := range verbs {
		assert.NotEmpty(t, byKey[v].summary, "%s: the verb table says what it does", v)
	}
	assert.Equal(t, "lifecycles per second and latencies, against the raw KV compare-and-set rate (docs/performance.md)",
		byKey["bench"].summary, "a summary over two lines of the usage text, whole")
	assert.Contains(t, flagNames(byKey[""].flags), "--version")
	assert.Contains(t, flagNames(byKey[""].flags), "--config")

	// A verb's flags are its flag set's: what -h lists.
	for _, c := range cmds {
		if len(c.words) == 0 || c.words[0] == "completion" || c.words[0] == "version" || c.words[0] == "help" || len(c.subs) > 0 {
			continue
		}
		r := cli(t, "", append(slices.Clone(c.words), "-h")...)
		require.Equal(t, exitOK, r.code, "%v -h: %s", c.words, r.stderr)
		listed := regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(r.stderr, -1)
		var names []string
		for _, m := range listed {
			names = append(names, "--"+m[1])
		}
		assert.Equal(t, names, flagNames(c.flags), "%v", c.words)
	}
	assert.Contains(t, flagNames(byKey["policy get"].flags), "--show-secrets")
	assert.Contains(t, flagNames(byKey["hook claude-code"].flags), "--on-error")
	assert.Contains(t, flagNames(byKey["serve"].flags), "--listen")
	assert.True(t, byKey["policy set"].fileArgs)
	assert.False(t, byKey["creds add"].fileArgs, "--out FILE is a flag's value")
	assert.False(t, byKey["mcp-gateway"].fileArgs, "--config FILE is a flag's value")
	assert.False(t, byKey["approve"].fileArgs)
	assert.Equal(t, "file", flagKind(byKey["pending"], "nats-creds"))
	assert.Equal(t, "dir", flagKind(byKey["pending"], "data"))
	assert.Equal(t, "", flagKind(byKey["pending"], "json"))

	// The subcommands listed are the verbs' own: each is dispatched (its
	// -h above lists its flags), one not listed is refused, and so is a
	// flag before the subcommand, saying where it goes.
	for _, v := range verbTable() {
		if len(v.subs) == 0 || v.cmd != nil || v.run != nil {
			continue // none, or the words of an argument the verb checks
		}
		r := cli(t, "", v.name, "frobnicate")
		assert.Equal(t, exitUsage, r.code, "%s frobnicate", v.name)
		assert.Contains(t, r.stderr, `unknown subcommand "frobnicate"`, v.name)
		r = cli(t, "", v.name, "--json")
		assert.Equal(t, exitUsage, r.code, "%s --json", v.name)
		assert.Contains(t, r.stderr, "the subcommand comes first: toolgate "+v.name+" "+strings.Join(v.subNames(), "|")+" [flags]", v.name)
	}
}

func flagKind(c complCmd, name string) string {
	for _, f := range c.flags {
		if f.name == name {
			return f.value
		}
	}
	return "missing"
}

// TestCompletion_Bash: the script is valid bash, registers itself for
// toolgate, and completes verbs, subcommands and a verb's flags, skipping
// the flags before the verb and their values.
func TestCompletion_Bash(t *testing.T) {
	t.Parallel()
	script := completionScript(t, "bash")
	out, err := exec.Command("bash", "-n", script).CombinedOutput()
	require.NoError(t, err, "bash -n: %s", out)

	lines := []struct{ line, want string }{
		{"toolgate ", "analytics approve backup bench budget cancel claude-channel completion creds events grants help hook list mcp mcp-gateway pending policy receipt reject respond restore retry serve show stats submit verify version webhook-secret"},
		{"toolgate pen", "pending"},
		{"toolgate p", "pending policy"},
		{"toolgate pending --j", "--json"},
		{"toolgate pending --nats-c", "--nats-creds"},
		{"toolgate policy ", "get set validate dry-run explain shadow"},
		{"toolgate policy get --sh", "--show-secrets"},
		{"toolgate creds ", "add list revoke init nats-config"},
		{"toolgate creds init --", "--config --data"},
		{"toolgate --nats nats://127.0.0.1:4222 --nats-creds a.creds pen", "pending"},
		{"toolgate --nats=nats://127.0.0.1:4222 s", "serve show stats submit"},
		{"toolgate --", "--config --context --data --nats --nats-creds --nats-password --nats-tls-ca --nats-tls-cert --nats-tls-key --nats-token --nats-user --version"},
		{"toolgate approve ID --rea", "--reason"},
		{"toolgate approve --scope ", ""}, // a flag's value: bash's own (file names)
		{"toolgate approve ", ""},
		{"toolgate hook ", "claude-code"},
		{"toolgate hook claude-code --on", "--on-error"},
		{"toolgate claude-channel --conv", "--conversation"},
		{"toolgate serve --li", "--listen"},
		{"toolgate completion ", "bash zsh fish"},
	}
	var drive strings.Builder
	fmt.Fprintf(&drive, "source %s\ncomplete -p toolgate\n", script)
	for _, l := range lines {
		// As bash sets them: COMP_WORDS split at blanks and COMP_WORDBREAKS.
		fmt.Fprintf(&drive, `COMP_LINE=%s; COMP_POINT=${#COMP_LINE}
COMP_WORDS=(); w=""
for ((i = 0; i < ${#COMP_LINE}; i++)); do
    c="${COMP_LINE:i:1}"
    if [[ $c == " " ]]; then [[ -n $w ]] && COMP_WORDS+=("$w"); w=""
    elif [[ $COMP_WORDBREAKS == *"$c"* ]]; then [[ -n $w ]] && COMP_WORDS+=("$w"); COMP_WORDS+=("$c"); w=""
    else w+="$c"; fi
done
COMP_WORDS+=("$w"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
_toolgate toolgate
echo "${COMPREPLY[*]}"
`, shQuote(l.line))
	}
	out, err = exec.Command("bash", "--norc", "--noprofile", "-c", drive.String()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, got, len(lines)+1, "%s", out)
	assert.Equal(t, "complete -o default -F _toolgate toolgate", got[0])
	for i, l := range lines {
		assert.Equal(t, l.want, got[i+1], "%q", l.line)
	}
}

// TestCompletion_ZshAndFish: the scripts name every verb, subcommand and
// flag, parse in their shells where installed, and fish's completes.
func TestCompletion_ZshAndFish(t *testing.T) {
	t.Parallel()
	cmds := completionCommands()

	zsh := completionScript(t, "zsh")
	data, err := os.ReadFile(zsh)
	require.NoError(t, err)
	text := string(data)
	assert.True(t, strings.HasPrefix(text, "#compdef toolgate\n"))
	assert.Contains(t, text, "compdef _toolgate toolgate")
	assert.Equal(t, len(regexp.MustCompile(`(?m)^\s*case .* in$`).FindAllString(text, -1)),
		len(regexp.MustCompile(`(?m)^\s*esac$`).FindAllString(text, -1)), "every case closed")
	for _, c := range cmds {
		for _, s := range c.subs {
			assert.True(t, strings.Contains(text, "'"+s+":"), "zsh: %s %s", c.key(), s)
		}
		for _, f := range c.flags {
			assert.Regexp(t, `[')]--`+regexp.QuoteMeta(f.name)+`=?\[`, text, "zsh: %s --%s", c.key(), f.name)
		}
	}
	path, err := exec.LookPath("zsh")
	require.NoError(t, err, "zsh checks the script's syntax (.ci/run installs it)")
	out, err := exec.Command(path, "-n", zsh).CombinedOutput()
	assert.NoError(t, err, "zsh -n: %s", out)

	fish := completionScript(t, "fish")
	data, err = os.ReadFile(fish)
	require.NoError(t, err)
	text = string(data)
	for _, c := range cmds {
		cond := "-n " + fishQuote("__toolgate_is "+fishQuote(c.key()))
		for _, s := range c.subs {
			assert.True(t, strings.Contains(text, "complete -c toolgate "+cond+" -a "+fishQuote(s)+" "), "fish: %s %s", c.key(), s)
		}
		for _, f := range c.flags {
			assert.True(t, strings.Contains(text, "complete -c toolgate "+cond+" -l "+f.name+" "), "fish: %s --%s", c.key(), f.name)
		}
	}
	path, err = exec.LookPath("fish")
	require.NoError(t, err, "fish checks the script and completes lines with it (.ci/run installs it)")
	out, err = exec.Command(path, "--no-execute", fish).CombinedOutput()
	require.NoError(t, err, "fish --no-execute: %s", out)
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"toolgate pen", []string{"pending"}},
		{"toolgate policy ", []string{"dry-run", "explain", "get", "set", "shadow", "validate"}},
		{"toolgate policy get --sh", []string{"--show-secrets"}},
		{"toolgate --nats nats://127.0.0.1:4222 pen", []string{"pending"}},
		{"toolgate approve --rea", []string{"--reason"}},
	} {
		out, err := exec.Command(path, "--no-config", "-c", "source "+fish+"; complete -C "+fishQuote(tc.line)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, _, _ := strings.Cut(l, "\t")
			got = append(got, name)
		}
		assert.Equal(t, tc.want, got, "%q", tc.line)
	}
}

// TestCompletion_Usage: a shell it does not know, or none, is a usage
// error; -h says how to load the script.
func TestCompletion_Usage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"completion"}, {"completion", "powershell"}, {"completion", "bash", "zsh"}} {
		r := cli(t, "", args...)
		assert.Equal(t, exitUsage, r.code, "%v", args)
		assert.Contains(t, r.stderr, "want one shell, bash, zsh or fish", "%v", args)
	}
	r := cli(t, "", "completion", "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "source <(toolgate completion bash)")
}

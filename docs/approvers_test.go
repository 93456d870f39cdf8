package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestApprovers_ServeCommandsParse: every `toolgate serve` of
// approvers.md is one toolgate takes, each flag known and each value
// read (--oidc-roles' mapping included), and the page names every
// single sign-on flag `toolgate serve -h` lists.
func TestApprovers_ServeCommandsParse(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("approvers.md")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "toolgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/toolgate")
	build.Dir = ".."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	usage, err := exec.Command(bin, "serve", "-h").CombinedOutput()
	require.NoError(t, err, "%s", usage)
	flags := regexp.MustCompile(`(?m)^  -(oidc-[a-z-]+)`).FindAllSubmatch(usage, -1)
	require.NotEmpty(t, flags)
	for _, f := range flags {
		assert.Contains(t, string(page), "`--"+string(f[1]), "approvers.md does not name --%s", f[1])
	}

	commands := 0
	for _, block := range fenced(string(page), "sh") {
		for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
			args := shellWords(t, line)
			if len(args) < 2 || args[0] != "toolgate" || args[1] != "serve" {
				continue
			}
			commands++
			// -h after every flag: each is parsed, none is served.
			out, err := exec.Command(bin, append(args[1:], "-h")...).CombinedOutput()
			assert.NoError(t, err, "approvers.md: %s\n%s", line, out)
			assert.NotRegexp(t, `invalid value|not defined|unexpected argument`, string(out), "approvers.md: %s", line)
		}
	}
	assert.Equal(t, 3, commands, "approvers.md's serve commands: Dex, Keycloak and Entra ID")
}

// TestApprovers_DexClientParses: the Dex configuration registers the
// inbox's callback.
func TestApprovers_DexClientParses(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("approvers.md")
	require.NoError(t, err)
	blocks := fenced(string(page), "yaml")
	require.Len(t, blocks, 1)
	var dex struct {
		Issuer        string `yaml:"issuer"`
		StaticClients []struct {
			ID           string   `yaml:"id"`
			Secret       string   `yaml:"secret"`
			RedirectURIs []string `yaml:"redirectURIs"`
		} `yaml:"staticClients"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(blocks[0]), &dex))
	require.Len(t, dex.StaticClients, 1)
	c := dex.StaticClients[0]
	assert.Equal(t, "toolgate", c.ID)
	assert.Equal(t, []string{"https://toolgate.example.com/auth/callback"}, c.RedirectURIs)
	assert.Contains(t, string(page), "export TOOLGATE_OIDC_CLIENT_SECRET="+c.Secret, "the serve command uses the client's secret")
	assert.Contains(t, string(page), "--oidc-issuer "+dex.Issuer+" ")
}

// shellWords splits a line of sh as the shell would, for the quoting the
// page uses: words, 'single' and "double" quotes.
func shellWords(t *testing.T, line string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	require.Zero(t, quote, "an unclosed quote in %q", line)
	if in {
		words = append(words, cur.String())
	}
	return words
}

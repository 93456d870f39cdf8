package docs

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLI_PageNamesEveryVerb: cli.md names every verb `toolgate help`
// lists, so that a new verb is on the page.
func TestCLI_PageNamesEveryVerb(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("cli.md")
	require.NoError(t, err)
	cmd := exec.Command("go", "run", "./cmd/toolgate", "help")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	help, err := cmd.CombinedOutput()
	require.NoError(t, err, "toolgate help:\n%s", help)
	verbs := regexp.MustCompile(`(?m)^  toolgate ([a-z-]+)`).FindAllSubmatch(help, -1)
	require.NotEmpty(t, verbs, "toolgate help lists no verbs:\n%s", help)
	for _, v := range verbs {
		named := regexp.MustCompile("`(toolgate )?" + regexp.QuoteMeta(string(v[1])) + "[` \\\\]")
		assert.True(t, named.Match(page), "cli.md does not name the verb %s", v[1])
	}
}

// TestCLI_PageNamesEveryServeFlag: cli.md's table of serve's flags names
// every flag `toolgate serve -h` lists.
func TestCLI_PageNamesEveryServeFlag(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("cli.md")
	require.NoError(t, err)
	cmd := exec.Command("go", "run", "./cmd/toolgate", "serve", "-h")
	cmd.Dir = ".."
	usage, err := cmd.CombinedOutput()
	require.NoError(t, err, "toolgate serve -h:\n%s", usage)
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllSubmatch(usage, -1)
	require.NotEmpty(t, flags, "toolgate serve -h lists no flags:\n%s", usage)
	for _, f := range flags {
		named := regexp.MustCompile("--" + regexp.QuoteMeta(string(f[1])) + "[` /,]")
		assert.True(t, named.Match(page), "cli.md does not name serve's flag --%s", f[1])
	}
}

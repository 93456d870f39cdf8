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

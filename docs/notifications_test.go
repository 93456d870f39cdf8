package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// TestNotifications_ExamplesParse: every YAML example of notifications.md
// is a policy toolgate accepts, a fragment (a scope's notify, or channels
// of it) once put in the default scope.
func TestNotifications_ExamplesParse(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("notifications.md")
	require.NoError(t, err)
	blocks := fenced(string(doc), "yaml")
	require.NotEmpty(t, blocks)
	for i, b := range blocks {
		switch {
		case strings.HasPrefix(b, "    - "):
			b = "default:\n  notify:\n" + b
		case strings.HasPrefix(b, "  "):
			b = "default:\n" + b
		}
		_, err := policy.Parse([]byte(b))
		assert.NoError(t, err, "notifications.md, YAML example %d:\n%s", i+1, b)
	}
}

// TestNotifications_ReceiverBuilds: the webhook receiver of
// notifications.md builds with the Standard Webhooks library, as a main.
func TestNotifications_ReceiverBuilds(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("notifications.md")
	require.NoError(t, err)
	blocks := fenced(string(doc), "go")
	require.Len(t, blocks, 1, "notifications.md: want the receiver's go block")
	imp, body, ok := strings.Cut(blocks[0], "\n")
	require.True(t, ok && strings.HasPrefix(imp, "import "), "notifications.md: the receiver starts with its import")
	src := "package main\n\nimport (\n\t\"io\"\n\t\"log\"\n\t\"net/http\"\n\t\"os\"\n)\n\n" + imp +
		"\n\nfunc main() {\n" + body + "\tlog.Fatal(http.ListenAndServe(\"127.0.0.1:0\", nil))\n}\n"
	main := filepath.Join(t.TempDir(), "main.go")
	require.NoError(t, os.WriteFile(main, []byte(src), 0o600))
	cmd := exec.Command("go", "build", "-o", os.DevNull, main)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "notifications.md's receiver:\n%s\n%s", out, src)
}

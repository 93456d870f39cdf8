package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadme_IsAMap: the README says what toolgate is, the two commands,
// the tour, the SDK and a map of docs/; the reference lives in docs/.
func TestReadme_IsAMap(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	lines := strings.Count(string(readme), "\n")
	assert.LessOrEqual(t, lines, 200, "README.md has %d lines: move reference text to a page of docs/", lines)
	assert.Contains(t, string(readme), "](docs/README.md)", "README.md links the docs' index")
}

// TestReadme_GoProgramBuilds: the README's Go block is a whole program
// that builds against this module's SDK as it is.
func TestReadme_GoProgramBuilds(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	blocks := fenced(string(readme), "go")
	require.Len(t, blocks, 1, "README.md: want one go block, a whole program")
	main := filepath.Join(t.TempDir(), "main.go")
	require.NoError(t, os.WriteFile(main, []byte(blocks[0]), 0o600))
	cmd := exec.Command("go", "build", "-o", os.DevNull, main)
	cmd.Dir = ".." // in the module, so that it builds against this tree
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "README.md's Go program:\n%s", out)
}

// TestDocs_GoSnippetsBuild: go-sdk.md's snippets build against the SDK
// as it is, the agent's as a function body and the executor's as one
// returning an error.
func TestDocs_GoSnippetsBuild(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("go-sdk.md")
	require.NoError(t, err)
	blocks := fenced(string(doc), "go")
	require.Len(t, blocks, 2, "go-sdk.md: want the agent's and the executor's go blocks")
	src := `package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

func search(ctx context.Context, args json.RawMessage) (json.RawMessage, error) { return args, nil }

func agent(ctx context.Context, args json.RawMessage) {
` + blocks[0] + `	_ = out
}

func executor(ctx context.Context, c *client.Client) error {
` + blocks[1] + `}

func main() {}
`
	main := filepath.Join(t.TempDir(), "main.go")
	require.NoError(t, os.WriteFile(main, []byte(src), 0o600))
	cmd := exec.Command("go", "build", "-o", os.DevNull, main)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "go-sdk.md's snippets:\n%s\n%s", out, src)
}

// TestDocs_LinksResolve: every relative link of the README and of the
// pages here names a file that exists, and an anchor a heading of its page,
// so that a section moved between pages leaves no link behind.
func TestDocs_LinksResolve(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		anchors[path] = headings(string(data))
		return anchors[path]
	}
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		require.NoError(t, err)
		for n, line := range prose(string(data)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
					_, err := os.Stat(path)
					if !assert.NoError(t, err, "%s:%d: link %s: no such file", page, n+1, target) {
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(path, ".md") {
					assert.True(t, anchorsOf(path)[anchor], "%s:%d: link %s: %s has no heading #%s", page, n+1, target, path, anchor)
				}
			}
		}
	}
}

// pages are the README and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	return append([]string{"../README.md"}, docs...)
}

// fenced returns the contents of doc's code blocks of language lang.
func fenced(doc, lang string) []string {
	var blocks []string
	for _, part := range strings.Split(doc, "\n```"+lang+"\n")[1:] {
		block, _, _ := strings.Cut(part, "\n```")
		blocks = append(blocks, block+"\n")
	}
	return blocks
}

// prose returns doc's lines with those of code blocks blanked, so that
// line numbers stay the file's.
func prose(doc string) []string {
	lines := strings.Split(doc, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

// headings returns the anchors GitHub gives doc's headings: lower case,
// letters, digits, hyphens and underscores kept, spaces made hyphens, and
// a repeated one numbered.
func headings(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(doc) {
		text, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = a + "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// TestDocs_IndexListsEveryPage: README.md here links every page of docs/.
func TestDocs_IndexListsEveryPage(t *testing.T) {
	t.Parallel()
	index, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, page := range pages(t) {
		if page == "../README.md" || page == "README.md" {
			continue
		}
		assert.Contains(t, string(index), "]("+page+")", "docs/README.md does not list %s", page)
	}
}

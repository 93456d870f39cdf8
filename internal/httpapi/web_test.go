package httpapi_test

import (
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/wire"
)

// TestInbox_ListensToEveryEvent: the inbox names the server-sent events it
// listens to; an event the relay publishes and the page does not name is
// never seen there (a reminder, say), so the list must be the contract's.
func TestInbox_ListensToEveryEvent(t *testing.T) {
	t.Parallel()
	js, err := os.ReadFile("web/app.js")
	require.NoError(t, err)
	list := regexp.MustCompile(`(?s)const SUBJECTS = \[(.*?)\];`).FindSubmatch(js)
	require.NotNil(t, list, "app.js has no SUBJECTS list")
	var named []string
	for _, m := range regexp.MustCompile(`'([^']+)'`).FindAllSubmatch(list[1], -1) {
		named = append(named, string(m[1]))
	}
	assert.ElementsMatch(t, wire.EventSubjects(), named)
}

// inboxFiles lists the files under web/, by their path there.
func inboxFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	require.NoError(t, fs.WalkDir(os.DirFS("web"), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}))
	return files
}

// inboxScripts lists the inbox's scripts, and fails when there are none:
// a check of each would pass by checking nothing.
func inboxScripts(t *testing.T) []string {
	t.Helper()
	var scripts []string
	for _, f := range inboxFiles(t) {
		if strings.HasSuffix(f, ".js") {
			scripts = append(scripts, f)
		}
	}
	require.NotEmpty(t, scripts, "web/ has no scripts")
	return scripts
}

// TestWeb_EveryScriptReadsInOneSitting: the inbox's scripts are modules,
// each about one part of the page and short enough to read whole. One
// that grows to 500 lines wants splitting by what its parts are about.
func TestWeb_EveryScriptReadsInOneSitting(t *testing.T) {
	t.Parallel()
	for _, name := range inboxScripts(t) {
		js, err := os.ReadFile(path.Join("web", name))
		require.NoError(t, err)
		lines := strings.Count(string(js), "\n")
		if len(js) > 0 && js[len(js)-1] != '\n' {
			lines++
		}
		assert.Less(t, lines, 500, "web/%s has %d lines", name, lines)
	}
}

// TestWeb_PageLoadsEveryModule: the page loads app.js as a module, and
// the imports from it reach every script under web/, each naming a file
// that is there: no script is left out of the page, none imports what
// is not served.
func TestWeb_PageLoadsEveryModule(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("web/index.html")
	require.NoError(t, err)
	require.Contains(t, string(page), `<script type="module" src="app.js"></script>`)

	scripts := inboxScripts(t)
	importRE := regexp.MustCompile(`(?m)^import .* from '\./([^']+)';$`)
	reached := map[string]string{"app.js": "index.html"} // a script, and what imports it first
	for todo := []string{"app.js"}; len(todo) > 0; todo = todo[1:] {
		if !slices.Contains(scripts, todo[0]) {
			continue
		}
		js, err := os.ReadFile(path.Join("web", todo[0]))
		require.NoError(t, err)
		for _, m := range importRE.FindAllStringSubmatch(string(js), -1) {
			if _, ok := reached[m[1]]; !ok {
				reached[m[1]] = todo[0]
				todo = append(todo, m[1])
			}
		}
	}
	for _, s := range scripts {
		assert.Contains(t, reached, s, "no import from app.js reaches web/%s", s)
	}
	for s, by := range reached {
		assert.Contains(t, scripts, s, "web/%s imports web/%s, which is not there", by, s)
	}
}

// TestInbox_ServesEveryFileAsWhatItIs: each of the inbox's files is served
// with its type under the page's policy; a script that comes as anything
// but JavaScript is not run at all.
func TestInbox_ServesEveryFileAsWhatItIs(t *testing.T) {
	t.Parallel()
	h := start(t, tokens)
	types := map[string]string{".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
	for _, name := range inboxFiles(t) {
		want, ok := types[path.Ext(name)]
		require.True(t, ok, "web/%s: what type should it be served as?", name)
		url := h.url + "/" + name
		if name == "index.html" {
			url = h.url + "/"
		}
		resp, err := http.Get(url)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		got, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		require.NoError(t, err, "%s: Content-Type %q", name, resp.Header.Get("Content-Type"))
		assert.Equal(t, want, got, name)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", name)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), name)
	}
}

package httpapi_test

import (
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"regexp"
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

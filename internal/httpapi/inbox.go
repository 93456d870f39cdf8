package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed web
var webFiles embed.FS

// inboxHas reports whether the inbox has a file (or a folder) at path.
func inboxHas(path string) bool {
	_, err := fs.Stat(webFiles, strings.TrimSuffix("web"+path, "/"))
	return err == nil
}

// inbox serves the web inbox: plain HTML, CSS and JavaScript embedded in
// the binary, nothing loaded from elsewhere.
func inbox() http.Handler {
	sub, _ := fs.Sub(webFiles, "web")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
}

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

// inbox serves the web inbox: plain HTML, CSS and JavaScript modules
// embedded in the binary, served as they are written (no build step),
// nothing loaded from elsewhere.
func inbox() http.Handler {
	sub, _ := fs.Sub(webFiles, "web")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// A browser runs a script sent with nosniff, as a module always,
		// only if it comes as JavaScript, and the file server takes a type
		// from the system's MIME tables before Go's own: one that maps .js
		// to anything else would break the page.
		if strings.HasSuffix(r.URL.Path, ".js") {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		}
		files.ServeHTTP(w, r)
	})
}

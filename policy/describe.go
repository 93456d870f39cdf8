package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"text/template"
	"unicode/utf8"
)

const (
	// maxDefaultDescription keeps the fallback description to one line
	// of a notification.
	maxDefaultDescription = 120
	// maxDescription bounds what a describe template may say.
	maxDescription = 500
	// maxTemplateLen keeps a describe template a sentence.
	maxTemplateLen = 4096
)

// templateFuncs are the functions a describe template may call besides
// text/template's own.
var templateFuncs = template.FuncMap{
	// json renders a value (a list, an object) as compact JSON.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

func parseTemplate(tool, src string) (*template.Template, error) {
	if len(src) > maxTemplateLen {
		return nil, errors.New("template longer than 4096 bytes")
	}
	return template.New(tool).Funcs(templateFuncs).Parse(src)
}

// errFull stops a template that says too much.
var errFull = errors.New("description full")

type cappedBuffer struct{ bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := 4*maxDescription - b.Len(); len(p) > room {
		b.Buffer.Write(p[:max(room, 0)])
		return max(room, 0), errFull
	}
	return b.Buffer.Write(p)
}

// render runs a describe template over a call's arguments. It reports false
// when the template fails, or refers to an argument the call lacks (which
// text/template renders as "<no value>": a human should never read that in
// an approval request), so the caller can fall back to the plain description.
func render(t *template.Template, args map[string]any) (string, bool) {
	var buf cappedBuffer
	if err := t.Execute(&buf, args); err != nil && !errors.Is(err, errFull) {
		return "", false
	}
	out := buf.String()
	if strings.Contains(out, "<no value>") {
		return "", false
	}
	out = strings.Join(strings.Fields(strings.ToValidUTF8(out, "\uFFFD")), " ")
	if out == "" {
		return "", false
	}
	return truncate(out, maxDescription), true
}

// defaultDescription is the tool's name and its arguments as compact JSON.
func defaultDescription(tool string, raw []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil || buf.String() == "{}" || buf.Len() == 0 {
		return tool
	}
	return truncate(tool+" "+buf.String(), maxDefaultDescription)
}

// truncate cuts s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
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

// parseTemplate parses a describe template and refuses what could make it
// run for long: a template runs on every submit of its tool, and
// text/template cannot be stopped once it runs. So a loop may go over the
// call's data, not over a number ({{range 1000000}}, {{range len .x}}), and
// loops do not nest; templates do not define or call templates, which
// could recurse. What is left runs in time linear in the call's arguments,
// which a request's size bounds.
func parseTemplate(tool, src string) (*template.Template, error) {
	if len(src) > maxTemplateLen {
		return nil, errors.New("template longer than 4096 bytes")
	}
	t, err := template.New(tool).Funcs(templateFuncs).Parse(src)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("a describe template may not define templates")
	}
	if err := checkNodes(t.Tree.Root, false); err != nil {
		return nil, err
	}
	return t, nil
}

// checkNodes walks a template's tree for what parseTemplate refuses.
func checkNodes(n parse.Node, inRange bool) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNodes(c, inRange); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return errors.New("a describe template may not call templates ({{template}}, {{block}})")
	case *parse.RangeNode:
		if inRange {
			return errors.New("a describe template's {{range}} loops may not nest: their cost would multiply")
		}
		if countsTo(n.Pipe) {
			return errors.New("{{range}} over a number may loop for as long as the number says; range over the call's data instead")
		}
		if err := checkNodes(n.List, true); err != nil {
			return err
		}
		return checkNodes(n.ElseList, inRange)
	case *parse.IfNode:
		if err := checkNodes(n.List, inRange); err != nil {
			return err
		}
		return checkNodes(n.ElseList, inRange)
	case *parse.WithNode:
		if err := checkNodes(n.List, inRange); err != nil {
			return err
		}
		return checkNodes(n.ElseList, inRange)
	}
	return nil
}

// countsTo reports whether a range's pipeline may be a number: a number
// literal, or anything computed by a call (len, index, a parenthesised
// pipeline), where a field or variable of the call's data is not.
func countsTo(p *parse.PipeNode) bool {
	for _, c := range p.Cmds {
		for _, a := range c.Args {
			switch a.(type) {
			case *parse.FieldNode, *parse.VariableNode, *parse.DotNode, *parse.ChainNode:
			default:
				return true
			}
		}
	}
	return false
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

// defaultDescription says what a call does without a describe template:
// for the shapes of arguments people know (a command line, an email, an
// HTTP request, a path, a query) in their words, "Bash: git push origin
// main", "send_email to team@acme.com: “Release notes”", "http GET
// https://api.example.com/v1"; otherwise the tool's name and its
// arguments as compact JSON.
func defaultDescription(tool string, raw []byte) string {
	if s := shapeDescription(tool, raw); s != "" {
		return truncate(strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " "), maxDefaultDescription)
	}
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

// shapeDescription is defaultDescription for arguments of a shape people
// know, "" for any other.
func shapeDescription(tool string, raw []byte) string {
	var args map[string]any
	if json.Unmarshal(raw, &args) != nil {
		return ""
	}
	str := func(k string) string { v, _ := args[k].(string); return v }
	switch {
	case str("command") != "":
		return tool + ": " + str("command")
	case args["command"] != nil:
		argv, ok := args["command"].([]any)
		words := make([]string, 0, len(argv))
		for _, a := range argv {
			w, isString := a.(string)
			if !isString {
				return ""
			}
			q, err := syntax.Quote(w, syntax.LangBash)
			if err != nil {
				return "" // a NUL byte: no command line says it
			}
			words = append(words, q)
		}
		if !ok || len(words) == 0 {
			return ""
		}
		return tool + ": " + strings.Join(words, " ")
	case str("to") != "" && str("subject") != "":
		return fmt.Sprintf("%s to %s: “%s”", tool, str("to"), str("subject"))
	case str("url") != "":
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", tool, strings.ToUpper(str("method")), str("url")))
	case str("file_path") != "":
		return tool + " " + str("file_path")
	case str("query") != "" && len(args) == 1:
		return fmt.Sprintf("%s “%s”", tool, str("query"))
	}
	return ""
}

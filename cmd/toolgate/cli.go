package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
)

// The CLI verbs talk to a running toolgate over NATS: its request API for
// calls, the policies bucket for the policy. Their exit codes:
const (
	exitOK       = 0
	exitRefused  = 1 // toolgate refused (conflict, forbidden, not found, invalid), or the verb failed
	exitUsage    = 2 // bad command line: unknown flag, bad flag value, missing argument
	exitRejected = 3 // submit: the call was rejected, timed out, cancelled or denied by policy
	exitFailed   = 4 // submit --wait: the call ran and failed
)

// defaultNATS is where `toolgate serve` listens by default.
const defaultNATS = "nats://127.0.0.1:4222"

// cliOutput is where a verb writes (results on stdout, everything else on
// stderr) and what it reads besides its arguments: the environment, and
// the flags given before the verb.
type cliOutput struct {
	stdout, stderr io.Writer
	env            lookupEnv
	globals        []globalFlag
}

// runCLI runs a verb built on a cliCmd (or on subcommands that are) and
// maps its error to an exit code, once, here.
func runCLI(ctx context.Context, v verb, args []string, out cliOutput) int {
	stderr, verb := out.stderr, v.name
	var err error
	if v.cmd != nil {
		err = v.command(out).run(ctx, args)
	} else {
		err = runSubcommand(ctx, v, args, out)
	}
	var (
		ue      *cliUsageError
		execErr *client.ExecutionError
	)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "toolgate %s: %s\nRun 'toolgate %s -h' for its flags.\n", ue.verb, ue.msg, ue.verb)
		return exitUsage
	case errors.Is(err, errUsage):
		return exitUsage // the flag package has said why
	case errors.Is(err, client.ErrRejected):
		fmt.Fprintf(stderr, "toolgate %s: %v\n", verb, err)
		return exitRejected
	case errors.As(err, &execErr):
		fmt.Fprintf(stderr, "toolgate %s: %v\n", verb, err)
		return exitFailed
	default:
		fmt.Fprintf(stderr, "toolgate %s: %v\n", verb, err)
		return exitRefused
	}
}

// cliUsageError is a bad command line, named by the flag or argument at fault.
type cliUsageError struct {
	verb, msg string
}

func (e *cliUsageError) Error() string { return e.msg }

// Is makes errors.Is(err, errUsage) hold.
func (e *cliUsageError) Is(target error) bool { return target == errUsage }

// cliCmd is one verb's command line: its flags, the connection flags every
// verb that talks to toolgate shares, and --json.
type cliCmd struct {
	verb string // "approve", "policy set"
	// synopsis and help are what -h prints above the flags.
	synopsis, help string
	fs             *flag.FlagSet
	// run parses the verb's arguments into fs (with parse) and does the
	// verb's work.
	run  func(ctx context.Context, args []string) error
	conn bus.ConnConfig
	// natsContext and data say where credentials come from when no
	// connection flag does (see credentials).
	natsContext, data string
	// config is toolgate's config file (--config); ownConfig is set when
	// the verb's own --config means something else (mcp-gateway's MCP
	// servers), and toolgate's config file is then given before the verb.
	config    string
	ownConfig bool
	json      bool
	out       cliOutput
	// credsFrom, in the errors of connect, names the NATS context the
	// server or credential came from, if one did.
	credsFrom string
}

// newCLICmd starts a verb's flag set; synopsis is its usage line after
// "toolgate", what follows the flags in the help text.
func newCLICmd(verb, synopsis, help string, out cliOutput) *cliCmd {
	c := &cliCmd{verb: verb, synopsis: synopsis, help: help, fs: flag.NewFlagSet(verb, flag.ContinueOnError), out: out}
	c.fs.SetOutput(out.stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(out.stderr, "Usage: toolgate %s\n\n%s\n\nFlags (each also read from TOOLGATE_<FLAG>, e.g. --nats-user from TOOLGATE_NATS_USER;\nthe connection's also from NATS_URL, NATS_CREDS, NATS_CONTEXT and the config file):\n", synopsis, help)
		c.fs.PrintDefaults()
	}
	return c
}

// tlsFlags adds the flags of a TLS connection to NATS, serve's and the
// CLI's.
func tlsFlags(fs *flag.FlagSet, c *bus.ConnConfig) {
	fs.StringVar(&c.TLSCA, "nats-tls-ca", "", "CA certificate (PEM) the NATS servers' certificates are checked against (default: the system's)")
	fs.StringVar(&c.TLSCert, "nats-tls-cert", "", "client certificate (PEM) for NATS servers that verify clients (with --nats-tls-key)")
	fs.StringVar(&c.TLSKey, "nats-tls-key", "", "the client certificate's private key (PEM)")
}

// connFlags adds the flags saying how to reach toolgate's NATS: the same
// names as serve's.
func (c *cliCmd) connFlags() *cliCmd {
	c.fs.StringVar(&c.conn.URLs, "nats", defaultNATS, "NATS server URLs (comma-separated) toolgate serves on")
	c.fs.StringVar(&c.conn.User, "nats-user", "", "NATS user (with --nats-password)")
	c.fs.StringVar(&c.conn.Password, "nats-password", "", "NATS password")
	c.fs.StringVar(&c.conn.Token, "nats-token", "", "NATS token")
	c.fs.StringVar(&c.conn.CredsFile, "nats-creds", "", "NATS credentials file (default: the admin credential of a toolgate serving from --data on this machine)")
	tlsFlags(c.fs, &c.conn)
	c.fs.StringVar(&c.natsContext, "context", "", "NATS context (as the nats CLI saves them) to take the server and credentials from")
	c.fs.StringVar(&c.data, "data", server.DefaultConfig().Data, "data directory of a toolgate serving on this machine, whose admin credential is used by default")
	return c
}

// jsonFlag adds --json.
func (c *cliCmd) jsonFlag(what string) *cliCmd {
	c.fs.BoolVar(&c.json, "json", false, "print "+what+" as JSON, for scripts")
	return c
}

// usagef returns a usage error for the verb.
func (c *cliCmd) usagef(format string, args ...any) error {
	return &cliUsageError{verb: c.verb, msg: fmt.Sprintf(format, args...)}
}

// parse parses args, which may mix flags and positional arguments in any
// order (`approve ID --reason R` and `approve --reason R ID`), fills the
// flags not given from the sources after the command line (see fill), and
// returns the positional arguments, of which there must be between least
// and most.
func (c *cliCmd) parse(args []string, least, most int, names string) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			break
		}
		// After "--" everything is positional.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if err := c.fill(); err != nil {
		if errors.Is(err, errUsage) {
			return nil, err
		}
		return nil, c.usagef("%v", err)
	}
	switch {
	case len(pos) < least:
		return nil, c.usagef("missing %s", names)
	case len(pos) > most:
		return nil, c.usagef("unexpected argument %q", pos[most])
	}
	return pos, nil
}

// connect dials toolgate's NATS and returns a client over it, with
// opts after the CLI's own. Without bg it is a person's connection: a
// first connect that fails fails at once, saying why in toolgate's words,
// and a request hears of a toolgate that is down within seconds; with bg,
// a server's (see background).
func (c *cliCmd) connect(bg *background, opts ...client.Option) (*nats.Conn, *client.Client, error) {
	cfg, err := c.credentials()
	if err != nil {
		return nil, nil, err
	}
	cfg.Name = "toolgate " + c.verb
	var extra []nats.Option
	if cfg.CredsFile != "" {
		if extra, err = client.Credentials(cfg.CredsFile); err != nil {
			return nil, nil, err
		}
	}
	report := func(err error) { fmt.Fprintf(c.out.stderr, "toolgate: NATS: %v\n", err) }
	// A person at a terminal hears of a toolgate that is down within
	// seconds; a restart in progress is still waited out.
	clientOpts := []client.Option{client.WithUnavailableWait(2 * time.Second)}
	if bg != nil {
		report = func(err error) { bg.log.Warn("NATS", "err", err) }
		extra = append(extra, bg.natsOptions(cfg.URLs)...)
		clientOpts = []client.Option{client.WithConnectWait(bg.wait), client.WithUnavailableWait(bg.wait)}
	}
	// A publish the credential may not make fails the request that made
	// it, which says so in toolgate's words: nats.go's own line for it
	// (printed by its default handler) would only come first.
	extra = append(extra, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			report(err)
		}
	}))
	// bus.Connect reconnects for ever: a `submit --wait` outlives a
	// toolgate restart. A first connect that fails still fails at once,
	// unless bg makes it in the background.
	nc, err := bus.Connect(cfg, extra...)
	switch {
	case err != nil && bg != nil:
		return nil, nil, fmt.Errorf("%w%s", err, c.credsFrom)
	case errors.Is(err, nats.ErrAuthorization) && cfg.CredsFile != "":
		return nil, nil, fmt.Errorf("%w: the server refused the credential %s%s (revoked, or not one this toolgate issued)", err, cfg.CredsFile, c.credsFrom)
	case errors.Is(err, nats.ErrAuthorization):
		return nil, nil, fmt.Errorf("%w: give a credential with --nats-creds or --context (docs/security.md)%s", err, c.credsFrom)
	case err != nil:
		return nil, nil, fmt.Errorf("%w (is toolgate serving there? --nats or TOOLGATE_NATS says where)%s", err, c.credsFrom)
	}
	cl, err := client.New(nc, append(clientOpts, opts...)...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cl, nil
}

// background is how a server on stdio or HTTP (the MCP gateway, `toolgate
// mcp`, claude-channel) connects: it must start, and answer, while
// toolgate is down. The connection is made in the background and made
// again whenever it drops, for as long as the process runs, and a request
// made while it is down waits for it at most wait, then fails saying
// toolgate is unreachable. NATS's asynchronous errors go to log, never to
// stderr as they are: a permission refused is left to the request it
// fails, which says so.
type background struct {
	log  *slog.Logger
	wait time.Duration
}

// natsOptions make the connection to urls in the background and log its
// outages, each once, not at every attempt.
func (bg *background) natsOptions(urls string) []nats.Option {
	var reported atomic.Bool
	return []nats.Option{
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(nc *nats.Conn) {
			reported.Store(false)
			bg.log.Info("connected to toolgate", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			reported.Store(false)
			bg.log.Info("reconnected to toolgate", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				bg.log.Warn("disconnected from toolgate; reconnecting", "err", err)
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if !reported.Swap(true) {
				bg.log.Warn("toolgate is unreachable; trying again until it answers", "nats", urls, "err", err)
			}
		}),
	}
}

// withClient connects to toolgate as a person does (see connect), runs f
// with a client over the connection, with opts after the CLI's own, and
// closes it.
func (c *cliCmd) withClient(ctx context.Context, f func(context.Context, *client.Client) error, opts ...client.Option) error {
	nc, cl, err := c.connect(nil, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	return f(ctx, cl)
}

// call is what most verbs do: connect to toolgate (the client with opts
// after the CLI's own), ask it with ask, and print its answer, as JSON
// with --json, else with text.
func call[T any](ctx context.Context, c *cliCmd, ask func(context.Context, *client.Client) (T, error), text func(T) error, opts ...client.Option) error {
	return c.withClient(ctx, func(ctx context.Context, cl *client.Client) error {
		v, err := ask(ctx, cl)
		if err != nil {
			return err
		}
		if c.json {
			return cliPrintJSON(c.out.stdout, v)
		}
		return text(v)
	}, opts...)
}

// callOn is the run of a verb whose one argument, an ID (names says
// what it is), is all it asks toolgate about: it asks with ask, a method
// of the client such as (*client.Client).Get, and prints the answer as
// call does.
func callOn[T any](c *cliCmd, names string, ask func(cl *client.Client, ctx context.Context, id string) (T, error), text func(T) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, names)
		if err != nil {
			return err
		}
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (T, error) { return ask(cl, ctx, pos[0]) }, text)
	}
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/claudecode"
)

// claudeChannelCmd is `toolgate claude-channel`: a Claude Code channel (an
// MCP server on stdio, launched with claude --channels) that relays the
// session's permission prompts to toolgate and sends its decisions back.
// Like `toolgate mcp` it starts, and answers, while toolgate is down: a
// prompt it cannot submit is left to Claude Code's own dialog.
func claudeChannelCmd(out cliOutput) *cliCmd {
	c := newCLICmd("claude-channel", "claude-channel [flags]",
		"A Claude Code channel on stdio that relays the session's permission prompts to toolgate: each prompt\n"+
			"becomes a call (the same policy, notifications, quorum and receipts), and toolgate's decision is sent\n"+
			"back as the prompt's answer. The first answer wins: one given in Claude Code first withdraws the call\n"+
			"(the PostToolUse hook tells toolgate the tool ran; the session ending withdraws the rest).", out).connFlags()
	var opts claudecode.Options
	c.fs.StringVar(&opts.Caller, "caller", "", "callerBotId of the calls (default: the credential's name; only an admin may name another)")
	c.fs.StringVar(&opts.Team, "team", "", "team of the calls, for the policy")
	conversation := c.fs.String("conversation", "", "conversation of the calls (default: $CLAUDE_CODE_SESSION_ID, the session's id as its hooks see it)")
	connectTimeout := defaultConnectTimeout
	c.fs.Var(durationFlag{&connectTimeout}, "connect-timeout", "how long a prompt waits for the connection to toolgate while it is down, before it is left\n"+
		"to Claude Code's dialog; the connection is retried for as long as the channel runs")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if connectTimeout <= 0 {
			return c.usagef("--connect-timeout: want a positive duration, got %s", connectTimeout)
		}
		if *conversation == "" {
			*conversation = os.Getenv("CLAUDE_CODE_SESSION_ID")
		}
		if *conversation == "" {
			*conversation = fmt.Sprintf("claude-code-%d-%d", time.Now().Unix(), os.Getpid())
		}
		// stdout is the MCP stream: the log goes to stderr.
		log := slog.New(slog.NewTextHandler(out.stderr, nil)).With("component", "claude-channel")
		nc, cl, err := c.connect(&background{log, connectTimeout})
		if err != nil {
			return err
		}
		defer nc.Close()
		return claudecode.NewChannel(clientGate{cl}, *conversation, version, opts, log).Run(ctx, os.Stdin, out.stdout)
	}
	return c
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// stdin is where `toolgate hook` reads the hook's input; tests replace it.
var stdin io.Reader = os.Stdin

// hookFlags adds the flags the hook and the MCP server share. timeout
// names what Claude Code's timeout for the verb is.
func hookFlags(c *cliCmd, opts *claudecode.Options, timeout string) {
	c.fs.StringVar(&opts.Caller, "caller", "", "callerBotId of the calls (default: the credential's name; only an admin may name another)")
	c.fs.StringVar(&opts.Team, "team", "", "team of the calls, for the policy")
	opts.Timeout = claudecode.DefaultTimeout
	c.fs.Var(durationFlag{&opts.Timeout}, "timeout", timeout+": seconds (600) or a duration (10m)")
	c.fs.Var(durationFlag{&opts.Wait}, "wait", "how long to wait for toolgate's verdict before withdrawing the call and handing it back to Claude Code's prompt;\n"+
		"at most --timeout less 10s (less half of it, under 20s), and that when 0. A call whose approval timeout\n"+
		"is at most --wait, and rejected then (autoRejectOnTimeout), is denied at its deadline instead")
}

// durationFlag is a flag in seconds, as Claude Code's settings give a
// hook's timeout, or a Go duration.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return "0"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := claudecode.ParseDuration(s)
	if err == nil {
		*f.d = d
	}
	return err
}

// checkWait refuses a --wait that --timeout leaves no time to answer in.
func checkWait(c *cliCmd, opts claudecode.Options) error {
	if _, err := claudecode.WaitFor(opts.Wait, opts.Timeout); err != nil {
		return c.usagef("--wait, --timeout: %v", err)
	}
	return nil
}

// clientGate is the hooks' Gate over the request API.
type clientGate struct{ *client.Client }

// Calls lists the conversation's calls of the tool.
func (g clientGate) Calls(ctx context.Context, conversationID, toolName string) ([]*machine.Entry, error) {
	return g.List(ctx, wire.ListRequest{ConversationID: conversationID, ToolName: toolName})
}

// hookCmd is `toolgate hook claude-code`: a Claude Code command hook for
// PreToolUse, PermissionRequest, PostToolUse, PostToolUseFailure and
// PermissionDenied. It
// prints the hook's JSON answer and exits 0 whatever toolgate said; when
// it cannot ask toolgate (unreachable, a credential toolgate refuses) that
// answer is a deny saying why (--on-error ask hands an outage to Claude
// Code's prompt instead). A bad command line, or an input it cannot read,
// exits 2 with why on stderr, which Claude Code takes as a block too:
// never an exit Claude Code would take as a non-blocking error, which runs
// the call. Stopped by a signal (Claude Code kills a hook at its timeout
// with SIGTERM) it withdraws the call it was waiting for and prints
// nothing.
func hookCmd(out cliOutput) *cliCmd {
	opts := claudecode.Options{Asked: time.Now()}
	c := newCLICmd("hook", "hook claude-code [flags] < hook-input.json",
		"A Claude Code hook (PreToolUse, PermissionRequest, PostToolUse, PostToolUseFailure, PermissionDenied): reads\n"+
			"the hook's JSON on stdin, submits the call to toolgate, waits for its verdict and prints Claude Code's answer.", out).connFlags()
	hookFlags(c, &opts, `the hook's "timeout" in Claude Code's settings (default 600, Claude Code's own)`)
	onError := c.fs.String("on-error", "deny", "the answer when toolgate cannot be reached or cannot decide: deny, or ask (Claude Code's own prompt decides)")
	c.fs.BoolVar(&opts.Headless, "headless", false, "the session is non-interactive (claude -p): a PreToolUse call that waits for a human answers defer at once\n"+
		"and stays pending in toolgate; resumed (claude -p --resume), the hook answers from the decision, or defers again")
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "the agent (claude-code)")
		if err != nil {
			return err
		}
		if pos[0] != "claude-code" {
			return c.usagef("unknown agent %q: toolgate has hooks for claude-code", pos[0])
		}
		switch *onError {
		case "ask", "deny":
			opts.OnError = claudecode.Behavior(*onError)
		default:
			return c.usagef("--on-error: want deny or ask, got %q", *onError)
		}
		if err := checkWait(c, opts); err != nil {
			return err
		}
		data, err := io.ReadAll(stdin)
		if err != nil {
			return hookBlocked(out, "stdin: %v", err)
		}
		in, err := claudecode.ParseInput(data)
		if err != nil {
			return hookBlocked(out, "stdin: %v", err)
		}
		answer, err := hookAnswer(ctx, c, in, opts)
		if err != nil {
			// Claude Code reads stdout; stderr is for people.
			fmt.Fprintf(out.stderr, "toolgate hook: %v\n", err)
		}
		if ctx.Err() != nil {
			// Claude Code stopped the hook and reads no answer.
			fmt.Fprintf(out.stderr, "toolgate hook: stopped (%v): a call it waited for is withdrawn; no answer\n", context.Cause(ctx))
			return nil
		}
		return json.NewEncoder(out.stdout).Encode(answer)
	}
	return c
}

// hookBlocked ends the hook with exit code 2, why on stderr: Claude Code's
// block (of the call at PreToolUse and PermissionRequest; at PostToolUse
// stderr goes to Claude). It is the code of a bad command line too
// (errUsage), which blocks so the same way.
func hookBlocked(out cliOutput, format string, args ...any) error {
	fmt.Fprintf(out.stderr, "toolgate hook: "+format+"\n", args...)
	return errUsage
}

// hookCredentialFix says how to give the command hook its credential.
const hookCredentialFix = "give the hook an agent's credential with --nats-creds in its command in Claude Code's settings (docs/claude-code.md)"

// hookAnswer asks toolgate about in and returns the hook's answer, and
// what went wrong, if anything, for stderr. Unreachable, or refusing the
// hook's credential, toolgate is answered for (claudecode.Failed): a
// refused credential is denied whatever --on-error says.
func hookAnswer(ctx context.Context, c *cliCmd, in claudecode.Input, opts claudecode.Options) (any, error) {
	nc, cl, err := c.connect(nil)
	if errors.Is(err, nats.ErrAuthorization) {
		err = fmt.Errorf("%w: toolgate refused the hook's credential: %v: %s", machine.ErrForbidden, err, hookCredentialFix)
	}
	if err != nil {
		return claudecode.Failed(in, opts, err), err
	}
	defer nc.Close()
	answer, err := claudecode.Handle(ctx, clientGate{cl}, in, opts)
	if err != nil {
		return claudecode.Failed(in, opts, err), err
	}
	if d, ok := answer.(claudecode.PreToolUseOutput); ok && d.HookSpecificOutput.PermissionDecision != claudecode.Allow {
		// Say why on stderr too, for whoever reads the hook's log.
		fmt.Fprintf(c.out.stderr, "toolgate hook: %s: %s\n", d.HookSpecificOutput.PermissionDecision, d.HookSpecificOutput.PermissionDecisionReason)
	}
	return answer, nil
}

// mcpCmd is `toolgate mcp`: an MCP server on stdio with the permission
// prompt tool approve, for claude --permission-prompt-tool
// mcp__toolgate__approve. It starts, and answers, while toolgate is down:
// a call it cannot ask toolgate about is denied, saying toolgate is
// unreachable, and it reconnects by itself.
func mcpCmd(out cliOutput) *cliCmd {
	c := newCLICmd("mcp", "mcp [flags]",
		"An MCP server on stdio with the tool approve, for Claude Code's\n--permission-prompt-tool mcp__toolgate__approve: it asks toolgate about each tool call and\n"+
			"answers allow or deny. The tool has no \"ask\": a call nobody decides within --wait is withdrawn\n"+
			"and denied, and so is a call toolgate cannot be asked about (it is unreachable). Its tool hook\n"+
			"answers an mcp_tool hook handler as toolgate hook claude-code answers a command hook.", out).connFlags()
	var opts claudecode.Options
	hookFlags(c, &opts, "how long Claude Code waits for a tool (MCP_TOOL_TIMEOUT)")
	c.fs.Lookup("wait").Usage = "how long to wait for toolgate's verdict before withdrawing the call and denying it;\n" +
		"at most --timeout less 10s (less half of it, under 20s), and that when 0. A call whose approval timeout\n" +
		"is at most --wait, and rejected then (autoRejectOnTimeout), is denied at its deadline instead"
	conversation := c.fs.String("conversation", "", "conversation of the calls (default: one per server, i.e. per Claude Code session)")
	connectTimeout := defaultConnectTimeout
	c.fs.Var(durationFlag{&connectTimeout}, "connect-timeout", "how long a call waits for the connection to toolgate while it is down, before it is denied\n"+
		"saying toolgate is unreachable; the connection is retried for as long as the server runs")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if err := checkWait(c, opts); err != nil {
			return err
		}
		if connectTimeout <= 0 {
			return c.usagef("--connect-timeout: want a positive duration, got %s", connectTimeout)
		}
		if *conversation == "" {
			*conversation = fmt.Sprintf("claude-code-%d-%d", time.Now().Unix(), os.Getpid())
		}
		// stdout is the MCP stream: the log goes to stderr.
		log := slog.New(slog.NewTextHandler(out.stderr, nil)).With("component", "mcp")
		nc, cl, err := c.connect(&background{log, connectTimeout})
		if err != nil {
			return err
		}
		defer nc.Close()
		return claudecode.NewMCPServer(clientGate{cl}, *conversation, version, opts).Run(ctx, &mcp.StdioTransport{})
	}
	return c
}

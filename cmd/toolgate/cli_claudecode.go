package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/claudecode"
)

// stdin is where `toolgate hook` reads the hook's input; tests replace it.
var stdin io.Reader = os.Stdin

// hookFlags adds the flags the hook and the MCP server share.
func hookFlags(c *cliCmd, opts *claudecode.Options) {
	c.fs.StringVar(&opts.Caller, "caller", "claude-code", "callerBotId of the calls")
	c.fs.StringVar(&opts.Team, "team", "", "team of the calls, for the policy")
	c.fs.DurationVar(&opts.Wait, "wait", 0, "how long to wait for a human before handing back to Claude Code's prompt (0: until the call's approval deadline)")
}

// cliHook is `toolgate hook claude-code`: a Claude Code command hook for
// PreToolUse, PermissionRequest and PostToolUse. It prints the hook's JSON
// answer and exits 0 whatever toolgate said; only a bad command line or
// input exits otherwise.
func cliHook(ctx context.Context, args []string, out cliOutput) error {
	c := newCLICmd("hook", "hook claude-code [flags] < hook-input.json",
		"A Claude Code hook (PreToolUse, PermissionRequest, PostToolUse): reads the hook's JSON on stdin,\nsubmits the call to toolgate, waits for its verdict and prints Claude Code's answer.", out).connFlags()
	var opts claudecode.Options
	hookFlags(c, &opts)
	onError := c.fs.String("on-error", "ask", "the answer when toolgate cannot be reached: ask or deny")
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
		return c.usagef("--on-error: want ask or deny, got %q", *onError)
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	in, err := claudecode.ParseInput(data)
	if err != nil {
		return c.usagef("stdin: %v", err)
	}
	answer, err := hookAnswer(ctx, c, in, opts)
	if err != nil {
		// Claude Code reads stdout; stderr is for people.
		fmt.Fprintf(out.stderr, "toolgate hook: %v\n", err)
	}
	return json.NewEncoder(out.stdout).Encode(answer)
}

func hookAnswer(ctx context.Context, c *cliCmd, in claudecode.Input, opts claudecode.Options) (any, error) {
	nc, cl, err := c.connect()
	if err != nil {
		return claudecode.Answer(in, claudecode.Unreachable(opts, err)), err
	}
	defer nc.Close()
	answer, err := claudecode.Handle(ctx, cl, in, opts)
	if err != nil {
		return struct{}{}, err
	}
	if d, ok := answer.(claudecode.PreToolUseOutput); ok && d.HookSpecificOutput.PermissionDecision != claudecode.Allow {
		// Say why on stderr too, for whoever reads the hook's log.
		fmt.Fprintf(c.out.stderr, "toolgate hook: %s: %s\n", d.HookSpecificOutput.PermissionDecision, d.HookSpecificOutput.PermissionDecisionReason)
	}
	return answer, nil
}

// cliMCP is `toolgate mcp`: an MCP server on stdio with the permission
// prompt tool approve, for claude --permission-prompt-tool
// mcp__toolgate__approve.
func cliMCP(ctx context.Context, args []string, out cliOutput) error {
	c := newCLICmd("mcp", "mcp [flags]",
		"An MCP server on stdio with one tool, approve, for Claude Code's\n--permission-prompt-tool mcp__toolgate__approve.", out).connFlags()
	var opts claudecode.Options
	hookFlags(c, &opts)
	conversation := c.fs.String("conversation", "", "conversation of the calls (default: one per server, i.e. per Claude Code session)")
	if _, err := c.parse(args, 0, 0, ""); err != nil {
		return err
	}
	if *conversation == "" {
		*conversation = fmt.Sprintf("claude-code-%d-%d", time.Now().Unix(), os.Getpid())
	}
	nc, cl, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	return claudecode.NewMCPServer(cl, *conversation, version, opts).Run(ctx, &mcp.StdioTransport{})
}

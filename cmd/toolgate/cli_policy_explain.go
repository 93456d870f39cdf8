package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/wire"
)

// policyExplainCmd is `toolgate policy explain TOOL [ARGS]`: how the
// policy in force decides one call, rule by rule, changing nothing.
func policyExplainCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy explain", "policy explain TOOL [ARGS] [--team T] [--conversation C] [--caller A] [--mode M] [--json] [flags]",
		"Evaluate a call of TOOL with ARGS (a JSON object; {} when left out) through the policy in\n"+
			"force and print its verdict, the argument the tool's rules read and its value, and each\n"+
			"rule naming the tool: whether it matched and why, or why it could not read the argument,\n"+
			"and each flow whose then names the tool: which earlier call makes it apply, if any.\n"+
			"The evaluation is dry (no grant consulted, no budget or rate limit counted) and nothing is\n"+
			"submitted or written. Viewers, approvers and admins.", out).connFlags().jsonFlag("the explanation")
	var r wire.PolicyExplainRequest
	c.fs.StringVar(&r.Team, "team", "", "the call's team")
	c.fs.StringVar(&r.ConversationID, "conversation", "", "the call's conversation")
	c.fs.StringVar(&r.CallerBotID, "caller", "", "the agent the call would come from (for flows scoped to the caller)")
	c.fs.StringVar(&r.PermissionMode, "mode", "", "the call's permission mode: default, acceptEdits, plan or bypassPermissions (default: the policy's)")
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 2, "the TOOL, and its ARGS as a JSON object")
		if err != nil {
			return err
		}
		r.ToolName, r.Arguments = pos[0], json.RawMessage(`{}`)
		if len(pos) == 2 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(pos[1]), &obj); err != nil || obj == nil {
				return c.usagef("ARGS: want a JSON object, such as '{\"path\":\"/tmp/a\"}', got %s", strconv.Quote(oneLine(pos[1], 80)))
			}
			r.Arguments = json.RawMessage(pos[1])
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (*wire.PolicyExplainReply, error) {
			return cl.PolicyExplain(ctx, r)
		}, func(reply *wire.PolicyExplainReply) error { return printExplain(out.stdout, r.ToolName, reply) })
	}
	return c
}

// printExplain prints an explanation for a person.
func printExplain(w io.Writer, tool string, r *wire.PolicyExplainReply) error {
	policyName := "the built-in defaults (no policy stored)"
	if r.PolicyRevision != 0 {
		policyName = fmt.Sprintf("the policy in force (revision %d)", r.PolicyRevision)
	}
	fmt.Fprintf(w, "%s under %s: %s\n", tool, policyName, r.Verdict)
	fmt.Fprintf(w, "  reason:   %s\n", r.Reason)
	if r.DelayMs > 0 {
		fmt.Fprintf(w, "  delay:    %s\n", shortDuration(time.Duration(r.DelayMs)*time.Millisecond))
	}
	switch {
	case r.Unreadable != "":
		fmt.Fprintf(w, "  argument: cannot be read: %s\n", r.Unreadable)
	case r.Argument != "":
		fmt.Fprintf(w, "  argument: %s = %s\n", r.Argument, strconv.Quote(r.Value))
	}
	if err := printExplainedFlows(w, tool, r.Flows); err != nil {
		return err
	}
	if len(r.Rules) == 0 {
		fmt.Fprintf(w, "no rule names %s\n", tool)
		return nil
	}
	fmt.Fprintf(w, "rules naming %s, in the order they are checked:\n", tool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tSCOPE\tPATTERN\tMATCHED\tWHY")
	for _, rule := range r.Rules {
		matched := "no"
		if rule.Matched {
			matched = "yes"
		}
		if rule.Decided {
			matched += ", decided"
		}
		fmt.Fprintf(tw, "  %s[%d]\t%s\t%s\t%s\t%s\n", rule.Kind, rule.Index, rule.Scope, strconv.Quote(rule.Pattern), matched, rule.Why)
	}
	return tw.Flush()
}

// printExplainedFlows prints the flows whose then names tool: whether
// each holds the call back, and after which earlier call.
func printExplainedFlows(w io.Writer, tool string, flows []wire.ExplainedFlow) error {
	if len(flows) == 0 {
		return nil
	}
	fmt.Fprintf(w, "flows whose then names %s, in the order they are checked:\n", tool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  FLOW\tAPPLIES\tWHY")
	for _, f := range flows {
		applies := "no"
		switch {
		case f.After != nil:
			applies = "yes (" + f.Action + ")"
		case f.Decided:
			applies = "yes (ask)" // its mark could not be read: Why says why
		}
		if f.Decided {
			applies += ", decided"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Flow, applies, f.Why)
	}
	return tw.Flush()
}

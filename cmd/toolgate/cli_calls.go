package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// submitCmd is `toolgate submit`.
func submitCmd(out cliOutput) *cliCmd {
	c := newCLICmd("submit", "submit --tool T --args JSON --conversation C [--caller BOT] [flags]",
		"Submit a tool call as an agent would and print its entry. A call already refused\n"+
			"(denied by policy) exits 3. With --wait, wait for the answer and print it: exit 0\n"+
			"when the call may run now (approved, or allowed without asking) or has run, 3 when\n"+
			"it was rejected, timed out, cancelled or denied by policy, 4 when it ran and failed.",
		out).connFlags().jsonFlag("the entry (with --wait, as it was answered)")
	var (
		call          machine.Call
		argsJSON      string
		wait, through bool
	)
	c.fs.StringVar(&call.ToolName, "tool", "", "the tool's name (required)")
	c.fs.StringVar(&argsJSON, "args", "{}", "the tool's arguments, a JSON object")
	c.fs.StringVar(&call.ConversationID, "conversation", "", "the conversation the call belongs to (required)")
	c.fs.StringVar(&call.CallerBotID, "caller", "", "the agent asking (default: the credential's name; only an admin may name another)")
	c.fs.StringVar(&call.Team, "team", "", "the team (swarm) whose policy applies")
	c.fs.StringVar(&call.TaskID, "task", "", "the task the call is part of: an approval with --scope task covers later calls like it of the task")
	c.fs.Float64Var(&call.EstimatedCost, "cost", 0, "the call's estimated cost")
	c.fs.StringVar(&call.ToolCallID, "id", "", "the tool call's id (default: generated); the same id submitted again gives the same entry")
	c.fs.StringVar(&call.PermissionMode, "mode", "", "the agent's permission mode: default, acceptEdits, plan or bypassPermissions")
	c.fs.BoolVar(&wait, "wait", false, "wait until the call may run, or is refused, and say which")
	c.fs.BoolVar(&through, "until-finished", false, "wait past the approval until the call has run (implies --wait; for calls executors run)")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		switch {
		case call.ToolName == "":
			return c.usagef("--tool: required")
		case call.ConversationID == "":
			return c.usagef("--conversation: required")
		case call.EstimatedCost < 0 || math.IsNaN(call.EstimatedCost) || math.IsInf(call.EstimatedCost, 0):
			return c.usagef("--cost: must be a number >= 0, got %v", call.EstimatedCost)
		case call.PermissionMode != "" && !policy.Mode(call.PermissionMode).Valid():
			return c.usagef("--mode: must be default, acceptEdits, plan or bypassPermissions, got %q", call.PermissionMode)
		}
		raw, err := jsonObject(argsJSON)
		if err != nil {
			return c.usagef("--args: %v", err)
		}
		call.Arguments = raw

		return c.withClient(ctx, func(ctx context.Context, cl *client.Client) error {
			e, err := cl.Submit(ctx, call)
			if err != nil {
				return err
			}
			// A call already answered for good (denied by policy, or an earlier
			// submit of the same id that was decided) is reported as --wait would.
			wait = wait || through || e.Status.Terminal()
			if !c.json {
				fmt.Fprintln(out.stdout, statusLine(e))
			}
			if !wait {
				if c.json {
					return cliPrintJSON(out.stdout, e)
				}
				return nil
			}
			var opts []client.AwaitOption
			if through {
				opts = append(opts, client.UntilFinished())
			}
			o, err := cl.Await(ctx, e.PendingID, opts...)
			if c.json {
				if last := answeredEntry(o, err); last != nil {
					if perr := cliPrintJSON(out.stdout, last); perr != nil {
						return perr
					}
				}
				return err
			}
			if err == nil {
				printOutcome(out, o)
			}
			return err
		})
	}
	return c
}

// statusLine says where a call stands in one line: its id, state and why.
func statusLine(e *machine.Entry) string {
	s := e.PendingID + " " + string(e.Status)
	if e.StatusReason != "" {
		s += ": " + e.StatusReason
	}
	return s
}

// answeredEntry is the entry an answer is about, whatever the answer.
func answeredEntry(o client.Outcome, err error) *machine.Entry {
	var (
		rej     *client.RejectedError
		execErr *client.ExecutionError
	)
	switch {
	case errors.As(err, &rej):
		return rej.Entry
	case errors.As(err, &execErr):
		return execErr.Entry
	}
	return o.Entry
}

func printOutcome(out cliOutput, o client.Outcome) {
	w := out.stdout
	switch o.Kind {
	case client.Approved:
		fmt.Fprintf(w, "approved by %s (scope %s)", o.By, cmp.Or(o.Scope, machine.ScopeOnce))
	case client.Scheduled:
		fmt.Fprint(w, "allowed without asking")
	case client.Executed:
		fmt.Fprintf(w, "executed: cost %s, result %s\n", formatMoney(o.Cost), cmp.Or(string(o.Result), "null"))
		return
	}
	if o.Reason != "" {
		fmt.Fprintf(w, ": %s", o.Reason)
	}
	fmt.Fprintln(w)
	label := "arguments"
	if o.Edited {
		label = "arguments (edited by the approver)"
	}
	fmt.Fprintf(w, "%s: %s\n", label, o.Arguments)
}

// jsonObject checks that s is a JSON object and returns it compacted.
func jsonObject(s string) (json.RawMessage, error) {
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		return nil, fmt.Errorf("must be a JSON object: %v", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("must be a JSON object, got %s", s)
	}
	return json.Marshal(obj)
}

// listFlags are the filters pending and list share.
func listFlags(c *cliCmd, withStatus bool) (*wire.ListRequest, *string) {
	r := new(wire.ListRequest)
	c.fs.StringVar(&r.ConversationID, "conversation", "", "only this conversation's calls (reads only its entries)")
	c.fs.StringVar(&r.ToolName, "tool", "", "only calls of this tool")
	c.fs.StringVar(&r.CallerBotID, "caller", "", "only calls of this agent")
	status := new(string)
	if withStatus {
		c.fs.StringVar(status, "status", "", "only calls in this state, e.g. PENDING_APPROVAL (any case)")
	}
	return r, status
}

// pendingCmd is `toolgate pending`.
func pendingCmd(out cliOutput) *cliCmd {
	c := newCLICmd("pending", "pending [--conversation C] [--tool T] [--caller BOT] [flags]",
		"List the calls waiting for a human's decision, oldest first.", out).connFlags().jsonFlag("the entries (an array)")
	r, _ := listFlags(c, false)
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		r.Status = machine.StatePendingApproval
		return listEntries(ctx, c, *r)
	}
	return c
}

// listCmd is `toolgate list`.
func listCmd(out cliOutput) *cliCmd {
	c := newCLICmd("list", "list [--conversation C] [--tool T] [--caller BOT] [--status S] [flags]",
		"List calls in any state, oldest first.", out).connFlags().jsonFlag("the entries (an array)")
	r, status := listFlags(c, true)
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *status != "" {
			r.Status = machine.State(strings.ToUpper(*status))
			if !r.Status.Valid() {
				names := make([]string, len(machine.States))
				for i, s := range machine.States {
					names[i] = string(s)
				}
				return c.usagef("--status: unknown state %q; want one of %s", *status, strings.Join(names, ", "))
			}
		}
		return listEntries(ctx, c, *r)
	}
	return c
}

// listEntries lists the calls r asks for, oldest first (--json: an
// array, empty when none match).
func listEntries(ctx context.Context, c *cliCmd, r wire.ListRequest) error {
	return call(ctx, c, func(ctx context.Context, cl *client.Client) ([]*machine.Entry, error) {
		entries, err := cl.List(ctx, r)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(entries, func(a, b *machine.Entry) int {
			return cmp.Or(cmp.Compare(a.RequestedAt, b.RequestedAt), strings.Compare(a.PendingID, b.PendingID))
		})
		if entries == nil {
			entries = []*machine.Entry{}
		}
		return entries, nil
	}, func(entries []*machine.Entry) error {
		if len(entries) == 0 {
			fmt.Fprintln(c.out.stderr, "no calls match")
			return nil
		}
		return printTable(c.out.stdout, entries, timeNow())
	})
}

// showCmd is `toolgate show`.
func showCmd(out cliOutput) *cliCmd {
	c := newCLICmd("show", "show ID [--reveal] [flags]", "Show one call: everything toolgate knows of it, its secrets masked.\n"+
		"--reveal shows its arguments as they are, to a role the policy's reveal names (admin\n"+
		"by default); toolgate records who was shown them, in the call's history.", out).connFlags().jsonFlag("the entry")
	reveal := c.fs.Bool("reveal", false, "show the arguments in clear (recorded)")
	c.run = callOn(c, "the call's ID (its pendingId)", func(cl *client.Client, ctx context.Context, id string) (*machine.Entry, error) {
		e, err := cl.Get(ctx, id)
		if err != nil || !*reveal || !e.SecretsMasked {
			return e, err
		}
		r, err := cl.Reveal(ctx, id)
		if err != nil {
			return nil, err
		}
		e.ToolArguments, e.OriginalArguments, e.SecretsMasked = r.ToolArguments, r.OriginalArguments, false
		return e, nil
	}, func(e *machine.Entry) error {
		return printEntry(out.stdout, e, timeNow())
	})
	return c
}

// approveCmd is `toolgate approve`.
func approveCmd(out cliOutput) *cliCmd {
	c := newCLICmd("approve", "approve ID [--reason R] [--scope once|task|session|always [--dry-run]] [--args JSON] [flags]\n"+
		"       toolgate approve --match PATTERN [--conversation C] [--team T] [--caller BOT] [--dry-run] [flags]",
		"Approve a pending call. --scope session also lets later calls like it in the same\n"+
			"conversation run without asking (a grant); --scope always, those of the team anywhere.\n"+
			"The grant covers what a pattern derived from the call covers, which it prints;\n"+
			"with --dry-run it prints the grant it would record and approves nothing.\n"+
			"A call someone else already decided is refused (exit 1), saying who decided it.\n"+
			"With --match, approve every call pending approval that the pattern covers (a tool\n"+
			"name, or a rule such as 'Bash(git push *)', covering a call as an allow rule would),\n"+
			"each its own decision; it lists what was approved and what was skipped and why.", out).connFlags().jsonFlag("the entry")
	var (
		d             wire.DecideRequest
		scope, edited string
		grantFor      time.Duration
	)
	c.fs.StringVar(&d.Reason, "reason", "", "why (the agent is told)")
	c.fs.StringVar(&scope, "scope", "once", "how far the approval reaches: once, task (the call's task), session or always")
	c.fs.StringVar(&edited, "args", "", "run the call with these arguments instead (a JSON object)")
	c.fs.DurationVar(&grantFor, "for", 0, "with --scope session or always: the grant ends after this long (e.g. 2h); default: until revoked")
	c.fs.BoolVar(&d.SingleUse, "single-use", false, "with --scope session or always: the grant lets one more call run, then is gone")
	c.fs.StringVar(&d.GrantMatch, "grant-match", "", "with --scope task, session or always: grant only later calls whose argument this covers\n(the specifier of a rule: '*@acme-corp.com' for send_email's to, as the policy's matchArgument names it; 'git status *' for Bash)")
	c.fs.BoolVar(&d.PersistRule, "persist-rule", false, "with --scope always: write an allow rule into the team's policy instead of a grant (admins only)")
	m := c.matchFlags()
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 0, 1, "the call's ID (its pendingId)")
		if err != nil {
			return err
		}
		if m.req.Match != "" {
			if scope != string(machine.ScopeOnce) || edited != "" || grantFor != 0 || d.PersistRule || d.SingleUse || d.GrantMatch != "" {
				return c.usagef("--match: approves each call once, as asked: no --scope or --args")
			}
			return m.decide(ctx, c, pos, true, d.Reason)
		}
		if len(pos) == 0 {
			return c.usagef("missing the call's ID, or --match PATTERN")
		}
		d.PendingID, d.Approved, d.Scope, d.ForMs = pos[0], true, machine.Scope(scope), grantFor.Milliseconds()
		switch d.Scope {
		case machine.ScopeOnce, machine.ScopeTask, machine.ScopeSession, machine.ScopeAlways:
		default:
			return c.usagef("--scope: must be once, task, session or always, got %q", scope)
		}
		if m.req.DryRun && d.Scope == machine.ScopeOnce {
			return c.usagef("--dry-run: with an ID, shows the grant a --scope task, session or always approval would record; once records none")
		}
		if edited != "" {
			if d.Arguments, err = jsonObject(edited); err != nil {
				return c.usagef("--args: %v", err)
			}
			if m.req.DryRun {
				return c.usagef("--dry-run: shows the grant an approval of the call as asked would record; leave out --args")
			}
		}
		return decide(ctx, c, d, m.req.DryRun)
	}
	return c
}

// rejectCmd is `toolgate reject`.
func rejectCmd(out cliOutput) *cliCmd {
	c := newCLICmd("reject", "reject ID --reason R [flags]\n"+
		"       toolgate reject --match PATTERN --reason R [--conversation C] [--team T] [--caller BOT] [--dry-run] [flags]",
		"Reject a pending call; the agent is told it was refused, and why.\n"+
			"A call someone else already decided is refused (exit 1), saying who decided it.\n"+
			"With --match, reject every call pending approval that the pattern covers (see approve).", out).connFlags().jsonFlag("the entry")
	var d wire.DecideRequest
	c.fs.StringVar(&d.Reason, "reason", "", "why (required: the agent is told)")
	c.fs.BoolVar(&d.Interrupt, "interrupt", false, "ask the agent to stop its turn, not only this call (Claude Code: the turn ends)")
	m := c.matchFlags()
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 0, 1, "the call's ID (its pendingId)")
		if err != nil {
			return err
		}
		if strings.TrimSpace(d.Reason) == "" {
			return c.usagef("--reason: required: say why, the agent is told")
		}
		if m.req.Match != "" {
			if d.Interrupt {
				return c.usagef("--interrupt: stops one agent's turn: give the call's ID, not --match")
			}
			return m.decide(ctx, c, pos, false, d.Reason)
		}
		if len(pos) == 0 {
			return c.usagef("missing the call's ID, or --match PATTERN")
		}
		if m.req.DryRun {
			return c.usagef("--dry-run: with --match only (a rejection records no grant to preview)")
		}
		d.PendingID = pos[0]
		return decide(ctx, c, d, false)
	}
	return c
}

// respondCmd is `toolgate respond`.
func respondCmd(out cliOutput) *cliCmd {
	c := newCLICmd("respond", "respond ID --result JSON|@FILE [--reason R] [flags]",
		"Answer a pending call with the tool's result instead of running it: the call\n"+
			"ends COMPLETED_SUCCESS with that result, recorded as yours, and no executor\n"+
			"sees it. Only a call of a tool the policy lists under respondable may be\n"+
			"answered so. The result is any JSON value, at most 64 KiB; @FILE reads it\n"+
			"from a file (@- from standard input).", out).connFlags().jsonFlag("the entry")
	var (
		d      wire.DecideRequest
		result string
	)
	c.fs.StringVar(&result, "result", "", "the tool's result to hand the agent: JSON, or @FILE")
	c.fs.StringVar(&d.Reason, "reason", "", "why (recorded with the call)")
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "the call's ID (its pendingId)")
		if err != nil {
			return err
		}
		if result == "" {
			return c.usagef("--result: required: the JSON the agent gets as the tool's result, or @FILE")
		}
		raw := []byte(result)
		if name, ok := strings.CutPrefix(result, "@"); ok {
			if name == "-" {
				raw, err = io.ReadAll(io.LimitReader(os.Stdin, machine.MaxResponse+1))
			} else {
				raw, err = os.ReadFile(name)
			}
			if err != nil {
				return c.usagef("--result: %v", err)
			}
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case len(raw) > machine.MaxResponse:
			return c.usagef("--result: at most %d bytes of JSON, got %d", machine.MaxResponse, len(raw))
		case !json.Valid(raw):
			return c.usagef("--result: not valid JSON (a string is quoted: '\"done\"')")
		}
		d.PendingID, d.Result = pos[0], raw
		return decide(ctx, c, d, false)
	}
	return c
}

// matchFlags are approve's and reject's flags for deciding every call a
// pattern covers.
type matchFlags struct{ req wire.DecideMatchingRequest }

func (c *cliCmd) matchFlags() *matchFlags {
	m := &matchFlags{}
	c.fs.StringVar(&m.req.Match, "match", "", "decide every pending call this pattern covers: a tool name or a rule such as 'Bash(git push *)'")
	c.fs.StringVar(&m.req.ConversationID, "conversation", "", "with --match: only this conversation's calls")
	c.fs.StringVar(&m.req.Team, "team", "", "with --match: only this team's calls")
	c.fs.StringVar(&m.req.CallerBotID, "caller", "", "with --match: only this agent's calls")
	c.fs.BoolVar(&m.req.DryRun, "dry-run", false, "decide nothing: with --match, list the calls it would decide; with approve ID --scope, print the grant it would record")
	return m
}

func (m *matchFlags) decide(ctx context.Context, c *cliCmd, pos []string, approve bool, reason string) error {
	if len(pos) > 0 {
		return c.usagef("--match: decides the calls it matches: give no ID")
	}
	m.req.Approved, m.req.Reason = approve, reason
	return call(ctx, c, func(ctx context.Context, cl *client.Client) (*wire.DecideMatchingReply, error) {
		return cl.DecideMatching(ctx, m.req)
	}, func(reply *wire.DecideMatchingReply) error {
		m.print(c.out, approve, reply)
		return nil
	})
}

// print says what deciding the calls the pattern matches did.
func (m *matchFlags) print(out cliOutput, approve bool, reply *wire.DecideMatchingReply) {
	verb := map[bool]string{true: "approved", false: "rejected"}[approve]
	w := out.stdout
	voted := ""
	if len(reply.Voted) > 0 {
		voted = fmt.Sprintf(", voted on %d", len(reply.Voted))
	}
	if reply.DryRun {
		fmt.Fprintf(w, "would have %s %s%s (dry run, nothing decided):\n", verb, counted(len(reply.Decided), "call", "calls"), voted)
	} else {
		fmt.Fprintf(w, "%s %s%s, skipped %d\n", verb, counted(len(reply.Decided), "call", "calls"), voted, len(reply.Skipped))
	}
	for _, d := range reply.Decided {
		fmt.Fprintf(w, "  %s %s (%s, from %s)\n", verb, d.Entry.PendingID, d.Entry.ToolName, d.Entry.CallerBotID)
	}
	for _, v := range reply.Voted {
		fmt.Fprintf(w, "  voted on %s (%s, from %s), still pending: %s\n", v.Entry.PendingID, v.Entry.ToolName, v.Entry.CallerBotID, v.Entry.Needed())
	}
	for _, s := range reply.Skipped {
		fmt.Fprintf(w, "  skipped %s (%s): %s: %s\n", s.Entry.PendingID, s.Entry.ToolName, s.Code, s.Reason)
	}
	if len(reply.Decided)+len(reply.Voted)+len(reply.Skipped) == 0 {
		fmt.Fprintf(out.stderr, "no pending calls match %s\n", m.req.Match)
	}
}

// decide decides one call. An approval that records a grant first asks
// what the grant would cover, so that the approver reads it (and, with
// dryRun, only reads it) and a call no grant can cover alone is refused
// before anything is decided, rather than approved once by surprise.
//
// A dry run is an approval that records a grant (approve and reject
// refuse any other).
func decide(ctx context.Context, c *cliCmd, d wire.DecideRequest, dryRun bool) error {
	w := c.out.stdout
	if dryRun {
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (*wire.GrantPreview, error) {
			return cl.GrantPreview(ctx, wire.GrantPreviewRequest{PendingID: d.PendingID, Scope: d.Scope, Match: d.GrantMatch})
		}, func(grant *wire.GrantPreview) error {
			if d.PersistRule {
				fmt.Fprintf(w, "would write the allow rule %s into the policy (dry run, nothing decided)\n", grant.Pattern)
				return nil
			}
			fmt.Fprintf(w, "would grant %s: %s (dry run, nothing decided)\n", grantReach(grant), grant.Pattern)
			return nil
		})
	}
	var grant *wire.GrantPreview
	return call(ctx, c, func(ctx context.Context, cl *client.Client) (e *machine.Entry, err error) {
		if d.Approved && d.Scope != machine.ScopeOnce && len(d.Arguments) == 0 {
			if grant, err = cl.GrantPreview(ctx, wire.GrantPreviewRequest{PendingID: d.PendingID, Scope: d.Scope, Match: d.GrantMatch}); err != nil {
				return nil, err
			}
		}
		return cl.Decide(ctx, d)
	}, func(e *machine.Entry) error { printDecided(w, e, d, grant); return nil })
}

// printDecided says what deciding a call as d did, and what a grant the
// approval recorded covers.
func printDecided(w io.Writer, e *machine.Entry, d wire.DecideRequest, grant *wire.GrantPreview) {
	if e.Status == machine.StatePendingApproval {
		// A say its quorum needs others besides.
		fmt.Fprintf(w, "%s: recorded, still pending: %s\n", e.PendingID, e.Needed())
		return
	}
	if d.Approved {
		fmt.Fprintf(w, "approved %s (%s) as %s, scope %s\n", e.PendingID, e.ToolName, e.ApprovedOrRejectedByUserID, e.DecisionScope)
		if grant != nil && !d.PersistRule {
			fmt.Fprintf(w, "grants: %s\n", grant.Pattern)
		}
		if len(e.OriginalArguments) > 0 {
			fmt.Fprintf(w, "it runs with the arguments %s\n", e.ToolArguments)
		}
		until := "until revoked (toolgate grants revoke)"
		if d.ForMs > 0 {
			until = "for " + (time.Duration(d.ForMs) * time.Millisecond).String()
		}
		if d.SingleUse {
			until = "once, " + until
		}
		// An approval of a call of no team reaches every team's, as the
		// default policy's rules do.
		team, policyOf := "every team's calls", "the default"
		if e.Team != "" {
			team, policyOf = "team "+e.Team+"'s calls", "team "+e.Team+"'s"
		}
		switch {
		case e.DecisionScope == machine.ScopeTask:
			fmt.Fprintf(w, "later calls like it of task %s in conversation %s run without asking, %s\n", e.TaskID, e.ConversationID, until)
		case e.DecisionScope == machine.ScopeSession:
			fmt.Fprintf(w, "later calls like it in conversation %s run without asking, %s\n", e.ConversationID, until)
		case e.DecisionScope == machine.ScopeAlways && d.PersistRule:
			fmt.Fprintf(w, "later calls like it run without asking: an allow rule of %s policy\n", policyOf)
		case e.DecisionScope == machine.ScopeAlways:
			fmt.Fprintf(w, "later calls like it among %s run without asking, %s\n", team, until)
		}
		return
	}
	if len(d.Result) > 0 {
		fmt.Fprintf(w, "answered %s (%s) as %s with the result you gave: the tool does not run\n", e.PendingID, e.ToolName, e.RespondedBy)
		return
	}
	fmt.Fprintf(w, "rejected %s (%s) as %s: %s\n", e.PendingID, e.ToolName, e.ApprovedOrRejectedByUserID, d.Reason)
	if e.Interrupt {
		fmt.Fprintln(w, "the agent is asked to stop its turn")
	}
}

// cancelCmd is `toolgate cancel`.
func cancelCmd(out cliOutput) *cliCmd {
	c := newCLICmd("cancel", "cancel ID | --conversation C [--reason R] [flags]",
		"Cancel a call that has not started running, or every such call of a conversation.\n"+
			"Running calls are listed, not cancelled.", out).connFlags().jsonFlag("the entry, or what a conversation's cancel did")
	var conv, reason string
	c.fs.StringVar(&conv, "conversation", "", "cancel every call of this conversation that has not started")
	c.fs.StringVar(&reason, "reason", "", "why (the agent is told)")
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 0, 1, "the call's ID, or --conversation")
		if err != nil {
			return err
		}
		switch {
		case len(pos) == 1 && conv != "":
			return c.usagef("give a call's ID or --conversation, not both")
		case len(pos) == 0 && conv == "":
			return c.usagef("missing the call's ID, or --conversation")
		}
		w := out.stdout
		if conv == "" {
			return call(ctx, c, func(ctx context.Context, cl *client.Client) (*machine.Entry, error) {
				return cl.Cancel(ctx, pos[0], "", reason)
			}, func(e *machine.Entry) error {
				_, err := fmt.Fprintf(w, "cancelled %s (%s)\n", e.PendingID, e.ToolName)
				return err
			})
		}
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (*wire.CancelConversationReply, error) {
			return cl.CancelConversation(ctx, conv, "", reason)
		}, func(reply *wire.CancelConversationReply) error {
			fmt.Fprintf(w, "cancelled %s of conversation %s\n", counted(len(reply.Cancelled), "call", "calls"), conv)
			for _, e := range reply.Cancelled {
				fmt.Fprintf(w, "  %s (%s)\n", e.PendingID, e.ToolName)
			}
			if len(reply.Running) > 0 {
				fmt.Fprintf(w, "%s already running, not cancelled:\n", counted(len(reply.Running), "call", "calls"))
				for _, e := range reply.Running {
					fmt.Fprintf(w, "  %s (%s)\n", e.PendingID, e.ToolName)
				}
			}
			return nil
		})
	}
	return c
}

// retryCmd is `toolgate retry`.
func retryCmd(out cliOutput) *cliCmd {
	c := newCLICmd("retry", "retry ID [--reason R] [flags]",
		"Run once more a call whose outcome is unknown: its executor was lost while the tool\n"+
			"may have run, and nothing runs it again by itself. The run is a new call, recorded\n"+
			"as your decision; a call is run again once.", out).connFlags().jsonFlag("the new call's entry")
	var reason string
	c.fs.StringVar(&reason, "reason", "", "why (recorded with the decision)")
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "the call's ID")
		if err != nil {
			return err
		}
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (*machine.Entry, error) {
			return cl.Rerun(ctx, wire.RerunRequest{PendingID: pos[0], Reason: reason})
		}, func(e *machine.Entry) error {
			if e.Status != machine.StateScheduled {
				_, err := fmt.Fprintf(out.stdout, "%s was run again already, as %s (%s): %s\n", e.RerunOf, e.PendingID, e.ToolName, e.Status)
				return err
			}
			_, err := fmt.Fprintf(out.stdout, "running %s again as %s (%s)\n", e.RerunOf, e.PendingID, e.ToolName)
			return err
		})
	}
	return c
}

// grantReach says in words what bounds a grant: "session conv-1".
func grantReach(g *wire.GrantPreview) string {
	switch {
	case g.Scope == machine.ScopeTask:
		return "task " + g.TaskID + " of conversation " + g.ConversationID
	case g.Scope == machine.ScopeSession:
		return "session " + g.ConversationID
	case g.Team != "":
		return "always, team " + g.Team + "'s calls"
	}
	return "always, every team's calls"
}

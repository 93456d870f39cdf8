package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// policyShadowActions are `toolgate policy shadow`'s actions, each its
// own command line.
var policyShadowActions = []struct {
	name string
	cmd  func(out cliOutput) *cliCmd
}{
	{"set", policyShadowSetCmd},
	{"get", policyShadowGetCmd},
	{"report", policyShadowReportCmd},
	{"promote", policyShadowPromoteCmd},
	{"clear", policyShadowClearCmd},
}

// policyShadowSynopsis is `policy shadow`'s line in `policy -h`.
const policyShadowSynopsis = "policy shadow set FILE|get|report|promote|clear [flags]"

// policyShadowCmd is `toolgate policy shadow ACTION`: it runs the
// action its first argument names.
func policyShadowCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy shadow", policyShadowSynopsis,
		"A shadow policy is a candidate beside the policy in force: every call submitted is also\n"+
			"evaluated against it, dry, and nothing it says is enforced.\n\n"+
			"  toolgate policy shadow set FILE      store FILE as the shadow policy (admins)\n"+
			"  toolgate policy shadow get           print it and its revision\n"+
			"  toolgate policy shadow report        what it would have changed of the calls submitted\n"+
			"  toolgate policy shadow promote --revision N\n"+
			"                                       put it in force, then drop it (admins)\n"+
			"  toolgate policy shadow clear         drop it (admins)\n\n"+
			"`toolgate policy shadow ACTION -h` describes each.", out)
	c.run = func(ctx context.Context, args []string) error {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
				c.fs.Usage()
				return nil
			}
			return c.usagef("the action comes first: toolgate %s", policyShadowSynopsis)
		}
		for _, a := range policyShadowActions {
			if a.name == args[0] {
				return verb{cmd: a.cmd}.command(out).run(ctx, args[1:])
			}
		}
		return c.usagef("unknown action %q: want set, get, report, promote or clear", args[0])
	}
	return c
}

// policyShadowSetCmd is `toolgate policy shadow set FILE`.
func policyShadowSetCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy shadow set", "policy shadow set FILE [flags]",
		"Store the policy document in FILE (YAML or JSON; - reads stdin) as the shadow policy:\n"+
			"from now on every call submitted is also evaluated against it, dry, enforcing nothing,\n"+
			"and each difference from the policy in force is counted (`policy shadow report`). FILE\n"+
			"is checked as `policy set` checks it; an invalid one is refused and the shadow stays as\n"+
			"it was. Admins only.", out).connFlags()
	c.run = storePolicy(c, (*client.Client).SetPolicyShadow, func(file string, stored wire.PolicyDocument) error {
		fmt.Fprintf(out.stdout, "shadow policy from %s set (revision %d): every call submitted is also evaluated against it, enforcing nothing\n", file, stored.Revision)
		_, err := fmt.Fprintf(out.stdout, "see what it would change: toolgate policy shadow report\n")
		return err
	})
	return c
}

// policyShadowGetCmd is `toolgate policy shadow get`.
func policyShadowGetCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy shadow get", "policy shadow get [--json] [--show-secrets] [flags]",
		"Print the shadow policy (YAML), its secrets redacted as `policy get` redacts them\n"+
			"(--show-secrets: admins only), and its revision on stderr, which `policy shadow\n"+
			"promote --revision` takes. Exit 1 when none is set.", out).connFlags().jsonFlag("the document and its revision")
	var showSecrets bool
	c.fs.BoolVar(&showSecrets, "show-secrets", false, "print secret values instead of \""+policy.RedactedValue+"\" (admins only)")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (wire.PolicyDocument, error) {
			return cl.PolicyShadow(ctx, wire.PolicyGetRequest{ShowSecrets: showSecrets})
		}, func(stored wire.PolicyDocument) error {
			fmt.Fprintf(out.stderr, "shadow policy, revision %d\n", stored.Revision)
			_, err := io.WriteString(out.stdout, stored.Document)
			return err
		})
	}
	return c
}

// policyShadowReportCmd is `toolgate policy shadow report`.
func policyShadowReportCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy shadow report", "policy shadow report [--since D] [--revision N] [--examples N] [--json] [flags]",
		"Print what the shadow policy would have changed of the calls submitted while it was set:\n"+
			"how many were compared, calls per change of verdict (allow, ask, deny) overall, per tool\n"+
			"and per team, and examples of each change with both policies' reasons. Each call is\n"+
			"evaluated when it is submitted through both policies, dry, as `policy dry-run` replays\n"+
			"it, so the counts are what a dry run of the same file says of the same calls. By\n"+
			"default the shadow set now (or, with none, the last one), over all that is kept (7\n"+
			"days); --since narrows it (a duration back from now, 7d, 36h, 90m, or a date). The last\n"+
			"second's calls are counted a moment later. Viewers, approvers and admins.", out).connFlags().jsonFlag("the report")
	since := c.fs.String("since", "", "the window: a duration back from now (7d, 36h, 90m) or a date (2025-03-01, RFC 3339); default: all kept")
	revision := c.fs.Uint64("revision", 0, "the shadow policy's revision to report on (default: the one set now)")
	examples := c.fs.Int("examples", wire.DefaultDryRunExamples, fmt.Sprintf("example calls to print of each change (1 to %d)", wire.MaxDryRunExamples))
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		r := wire.PolicyShadowReportRequest{Revision: *revision, Examples: *examples}
		if *since != "" {
			var err error
			if r.Since, err = parseSince(*since, time.Now()); err != nil {
				return c.usagef("--since: %v", err)
			}
		}
		if *examples < 1 || *examples > wire.MaxDryRunExamples {
			return c.usagef("--examples: must be 1 to %d, got %d", wire.MaxDryRunExamples, *examples)
		}
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (*wire.PolicyShadowReport, error) {
			return cl.PolicyShadowReport(ctx, r)
		}, func(reply *wire.PolicyShadowReport) error { return printShadowReport(out.stdout, reply) })
	}
	return c
}

// printShadowReport prints a shadow policy's report for a person.
func printShadowReport(w io.Writer, r *wire.PolicyShadowReport) error {
	switch {
	case r.ShadowRevision == 0:
		fmt.Fprintln(w, "no shadow policy is set, and none was recorded: toolgate policy shadow set FILE sets one")
		return nil
	case r.Set:
		fmt.Fprintf(w, "shadow policy revision %d (set now; promote it with: toolgate policy shadow promote --revision %d)\n", r.ShadowRevision, r.ShadowRevision)
	default:
		fmt.Fprintf(w, "shadow policy revision %d (no longer set)\n", r.ShadowRevision)
	}
	fmt.Fprintf(w, "%s compared from %s to %s: %d would change\n", counted(r.Calls, "call", "calls"), stamp(r.Since), stamp(r.Until), r.Changed)
	if r.Skipped > 0 {
		fmt.Fprintf(w, "%s not be evaluated and %s left out\n", counted(r.Skipped, "call could", "calls could"), plural(r.Skipped, "is", "are"))
	}
	if r.Calls == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printVerdicts(tw, r.Verdicts, r.ByTool, r.ByTeam)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Examples) > 0 {
		fmt.Fprintln(w, "\nEXAMPLES")
	}
	for _, e := range r.Examples {
		fmt.Fprintf(w, "%s  %s  %s  %s  %s\n", arrow(e.From, e.To), e.PendingID, e.ToolName, teamName(e.Team), oneLine(e.Description, 80))
		fmt.Fprintf(w, "    in force: %s\n    shadow:   %s\n", e.CurrentReason, e.CandidateReason)
	}
	return nil
}

// policyShadowPromoteCmd is `toolgate policy shadow promote`.
func policyShadowPromoteCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy shadow promote", "policy shadow promote --revision N [flags]",
		"Put the shadow policy in force, as `policy set` would, then drop it. --revision is the\n"+
			"shadow's revision, as `policy shadow get` and `policy shadow report` print it: a shadow\n"+
			"set again since is not promoted. Admins only.", out).connFlags()
	revision := c.fs.Uint64("revision", 0, "the shadow policy's revision (required)")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *revision == 0 {
			return c.usagef("--revision: required: the shadow policy's revision, as `toolgate policy shadow get` prints it")
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (wire.PolicyDocument, error) {
			return cl.PromotePolicyShadow(ctx, *revision)
		}, func(inForce wire.PolicyDocument) error {
			_, err := fmt.Fprintf(out.stdout, "shadow policy revision %d in force (policy revision %d); no shadow policy is set now\n", *revision, inForce.Revision)
			return err
		})
	}
	return c
}

// policyShadowClearCmd is `toolgate policy shadow clear`.
func policyShadowClearCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy shadow clear", "policy shadow clear [flags]",
		"Drop the shadow policy: calls are no longer compared against it. Its report stays\n"+
			"(`policy shadow report --revision N`). Admins only.", out).connFlags()
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (wire.PolicyShadowCleared, error) {
			return cl.ClearPolicyShadow(ctx)
		}, func(cleared wire.PolicyShadowCleared) error {
			if cleared.Revision == 0 {
				fmt.Fprintln(out.stdout, "no shadow policy was set")
				return nil
			}
			_, err := fmt.Fprintf(out.stdout, "shadow policy revision %d cleared\n", cleared.Revision)
			return err
		})
	}
	return c
}

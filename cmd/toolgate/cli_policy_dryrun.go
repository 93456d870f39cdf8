package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// policyDryRunCmd is `toolgate policy dry-run FILE`: what the candidate
// in FILE would change over the recorded calls, changing nothing.
func policyDryRunCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy dry-run", "policy dry-run FILE [--since 7d] [--team T] [--examples N] [--json] [flags]",
		"Replay the calls recorded in the window (--since: a duration back from now, 7d, 36h, 90m,\n"+
			"or a date, 2025-03-01 or RFC 3339) through the candidate policy in FILE (YAML or JSON;\n"+
			"- reads stdin) beside the one in force, and print what would change: calls per change\n"+
			"of verdict (allow, ask, deny) overall, per tool and per team, each team's spend on calls\n"+
			"run without asking against its dailyCostLimit, and examples of each change. Both\n"+
			"policies evaluate dry (no grant consulted, no budget counted) and nothing is written.\n"+
			"Secrets may be left \""+policy.RedactedValue+"\", as `policy get` prints them. Viewers, approvers\n"+
			"and admins.", out).connFlags().jsonFlag("the report")
	since := c.fs.String("since", "7d", "the window: a duration back from now (7d, 36h, 90m) or a date (2025-03-01, RFC 3339)")
	team := c.fs.String("team", "", `only this team's calls ("" for calls that name no team, with --team "")`)
	examples := c.fs.Int("examples", wire.DefaultDryRunExamples, fmt.Sprintf("example calls to print of each change (1 to %d)", wire.MaxDryRunExamples))
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "the candidate policy FILE")
		if err != nil {
			return err
		}
		r := wire.PolicyDryRunRequest{Examples: *examples}
		if r.Since, err = parseSince(*since, time.Now()); err != nil {
			return c.usagef("--since: %v", err)
		}
		if *examples < 1 || *examples > wire.MaxDryRunExamples {
			return c.usagef("--examples: must be 1 to %d, got %d", wire.MaxDryRunExamples, *examples)
		}
		c.fs.Visit(func(f *flag.Flag) {
			if f.Name == "team" {
				r.Team = team
			}
		})
		data, err := readFileOrStdin(pos[0])
		if err != nil {
			return err
		}
		if _, err := policy.ParseCandidate(data); err != nil {
			return fmt.Errorf("%s: %w", pos[0], err) // offline, before asking toolgate
		}
		r.Document = string(data)
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (*wire.PolicyDryRunReply, error) {
			reply, err := cl.PolicyDryRun(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", pos[0], err)
			}
			return reply, nil
		}, func(reply *wire.PolicyDryRunReply) error { return printDryRun(out.stdout, pos[0], reply) })
	}
	return c
}

// parseSince reads --since: a duration back from now (Go's, or whole
// days: 7d) or a date (YYYY-MM-DD, UTC midnight, or RFC 3339). It returns
// epoch milliseconds.
func parseSince(s string, now time.Time) (int64, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UnixMilli(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t.UnixMilli(), nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("want a duration (7d, 36h, 90m) or a date (2025-03-01, RFC 3339), got %q", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want a duration (7d, 36h, 90m) or a date (2025-03-01, RFC 3339), got %q", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("want a duration above 0, got %q", s)
	}
	return now.Add(-d).UnixMilli(), nil
}

// readFileOrStdin reads file; "-" is stdin.
func readFileOrStdin(file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(file)
}

func arrow(from, to string) string { return from + " → " + to }

func teamName(team string) string {
	if team == "" {
		return "(no team)"
	}
	return team
}

// changesOf lists a group's changes of verdict: "allow → ask 125, …".
func changesOf(counts []wire.VerdictCount) string {
	var parts []string
	for _, v := range counts {
		if v.From != v.To {
			parts = append(parts, fmt.Sprintf("%s %d", arrow(v.From, v.To), v.Calls))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// stamp is an epoch-milliseconds time as a report prints it.
func stamp(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04 UTC") }

// printVerdicts writes a report's tables of verdicts: the calls per pair,
// then per tool and per team (a dry run's, a shadow policy's).
func printVerdicts(tw *tabwriter.Writer, verdicts []wire.VerdictCount, byTool, byTeam []wire.DryRunGroup) {
	fmt.Fprintln(tw, "\nVERDICT\tCALLS")
	for _, v := range verdicts {
		what := arrow(v.From, v.To)
		if v.From == v.To {
			what = v.From + " (unchanged)"
		}
		fmt.Fprintf(tw, "%s\t%d\n", what, v.Calls)
	}
	for _, g := range []struct {
		title  string
		groups []wire.DryRunGroup
	}{{"TOOL", byTool}, {"TEAM", byTeam}} {
		fmt.Fprintf(tw, "\n%s\tCALLS\tCHANGED\tCHANGES\n", g.title)
		for _, x := range g.groups {
			name := x.Name
			if g.title == "TEAM" {
				name = teamName(name)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", name, x.Calls, x.Changed, changesOf(x.Verdicts))
		}
	}
}

// printDryRun prints a dry run's report for a person.
func printDryRun(w io.Writer, file string, r *wire.PolicyDryRunReply) error {
	against := "the built-in defaults (no policy stored)"
	if r.PolicyRevision != 0 {
		against = fmt.Sprintf("the policy in force (revision %d)", r.PolicyRevision)
	}
	fmt.Fprintf(w, "%s against %s, nothing changed\n", file, against)
	scope := "every team"
	if r.Team != nil {
		scope = "team " + teamName(*r.Team)
	}
	fmt.Fprintf(w, "%s from %s to %s (%s): %d would change\n", counted(r.Calls, "call", "calls"), stamp(r.Since), stamp(r.Until), scope, r.Changed)
	if r.Skipped > 0 {
		fmt.Fprintf(w, "%s not be evaluated and %s left out (%s)\n", counted(r.Skipped, "call could", "calls could"), plural(r.Skipped, "is", "are"), r.SkippedReason)
	}
	if r.Calls == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printVerdicts(tw, r.Verdicts, r.ByTool, r.ByTeam)
	fmt.Fprintln(tw, "\nBUDGET: estimated cost of the calls run without asking")
	fmt.Fprintln(tw, "TEAM\tIN FORCE\tCANDIDATE\tCANDIDATE'S DAILY LIMIT\tOVER IT ON")
	for _, b := range r.Budgets {
		limit, over := "none", "-"
		if b.Candidate.DailyCostLimit != nil {
			limit = formatMoney(*b.Candidate.DailyCostLimit)
		}
		if len(b.Candidate.OverLimit) > 0 {
			var days []string
			for _, d := range b.Candidate.OverLimit {
				days = append(days, fmt.Sprintf("%s (%s)", d.Day, formatMoney(d.AutoRunCost)))
			}
			over = strings.Join(days, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", teamName(b.Team), formatMoney(b.Current.AutoRunCost), formatMoney(b.Candidate.AutoRunCost), limit, over)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "(a dry run counts no budget: past a daily limit, calls would be asked about)\n")
	fmt.Fprintf(w, "\nagainst the verdicts recorded: %s under the policy in force (grants, budgets, older policies), %d under the candidate\n",
		counted(r.Recorded.Current, "call differs", "calls differ"), r.Recorded.Candidate)
	if len(r.Examples) > 0 {
		fmt.Fprintln(w, "\nEXAMPLES")
	}
	for _, e := range r.Examples {
		fmt.Fprintf(w, "%s  %s  %s  %s  %s\n", arrow(e.From, e.To), e.PendingID, e.ToolName, teamName(e.Team), oneLine(e.Description, 80))
		fmt.Fprintf(w, "    in force:  %s\n    candidate: %s\n", e.CurrentReason, e.CandidateReason)
	}
	return nil
}

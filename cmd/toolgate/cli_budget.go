package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/wire"
)

// budgetCmd is `toolgate budget`: it prints the budget ledger.
func budgetCmd(out cliOutput) *cliCmd {
	c := newCLICmd("budget", "budget [--team T] [--json] [flags]",
		"Show each team's spending per UTC day: the estimated cost reserved by calls\n"+
			"allowed and not yet finished, what finished calls cost, and the daily limit\n"+
			"the policy sets (dailyCostLimit).", out).connFlags().jsonFlag("the ledger")
	team := c.fs.String("team", "", `only this team ("" for calls that name no team, with --team "")`)
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		var r wire.BudgetsRequest
		c.fs.Visit(func(f *flag.Flag) {
			if f.Name == "team" {
				r.Team = team
			}
		})
		return call(ctx, c, func(ctx context.Context, cl *client.Client) ([]wire.Budget, error) {
			reply, err := cl.Budgets(ctx, r)
			if err != nil {
				return nil, err
			}
			return reply.Items, nil
		}, func(items []wire.Budget) error { return printBudgets(out.stdout, items) })
	}
	return c
}

func printBudgets(w io.Writer, items []wire.Budget) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(w, "no spending recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TEAM\tDAY\tRESERVED\tSPENT\tLIMIT")
	for _, b := range items {
		limit := "none"
		if b.Limit != nil {
			limit = formatMoney(*b.Limit)
		}
		team := b.Team
		if team == "" {
			team = "(no team)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", team, b.Day,
			formatMoney(b.Reserved), formatMoney(b.Spent), limit)
	}
	return tw.Flush()
}

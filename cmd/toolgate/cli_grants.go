package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/wire"
)

// grantsListCmd is `toolgate grants list`.
func grantsListCmd(out cliOutput) *cliCmd {
	c := newCLICmd("grants list", "grants list [--conversation C] [--json] [flags]",
		"List the grants in force: what each covers, whose approval of which call\n"+
			"granted it, and until when.", out).connFlags().jsonFlag("the grants")
	conv := c.fs.String("conversation", "", "only this conversation's session grants")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		return call(ctx, c, func(ctx context.Context, cl *client.Client) ([]wire.Grant, error) {
			return cl.Grants(ctx, *conv)
		}, func(grants []wire.Grant) error {
			if len(grants) == 0 {
				fmt.Fprintln(out.stderr, "no grants in force")
				return nil
			}
			return printGrants(out.stdout, grants, timeNow())
		})
	}
	return c
}

func printGrants(w io.Writer, grants []wire.Grant, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCOVERS\tSCOPE\tBY\tFROM CALL\tEXPIRES")
	for _, g := range grants {
		scope := "always"
		if g.Team != "" {
			scope += " (team " + g.Team + ")"
		}
		if g.ConversationID != "" {
			scope = "session " + g.ConversationID
		}
		if g.TaskID != "" {
			scope = "task " + g.TaskID + " of " + g.ConversationID
		}
		expires := "never"
		if g.ExpiresAt > 0 {
			expires = "in " + shortDuration(time.UnixMilli(g.ExpiresAt).Sub(now))
		}
		if g.SingleUse {
			expires += ", single use"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, g.Pattern, scope, g.By, g.PendingID, expires)
	}
	return tw.Flush()
}

// grantsRevokeCmd is `toolgate grants revoke`.
func grantsRevokeCmd(out cliOutput) *cliCmd {
	c := newCLICmd("grants revoke", "grants revoke ID [flags]",
		"End a grant at once: later calls it covered are asked about again.", out).connFlags().jsonFlag("the grant revoked")
	c.run = callOn(c, "the grant's ID (see grants list)", (*client.Client).RevokeGrant, func(g *wire.Grant) error {
		_, err := fmt.Fprintf(out.stdout, "revoked grant %s (%s, by %s)\n", g.ID, g.Pattern, g.By)
		return err
	})
	return c
}

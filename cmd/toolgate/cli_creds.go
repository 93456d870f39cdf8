package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/wire"
)

// credsAddCmd is `toolgate creds add`.
func credsAddCmd(out cliOutput) *cliCmd {
	c := newCLICmd("creds add", "creds add --user NAME --role ROLE [--out FILE] [flags]",
		"Issue a NATS credential for a new identity and write its .creds file (readable by\n"+
			"its owner only). toolgate keeps no copy: whoever holds the file is NAME.", out).connFlags().jsonFlag("the identity and the credential")
	var name, role, file string
	c.fs.StringVar(&name, "user", "", "the identity's name: letters, digits, '-' or '_'")
	c.fs.StringVar(&role, "role", "", "agent, executor, approver, viewer or admin")
	c.fs.StringVar(&file, "out", "", "where to write the credential (default NAME.creds here)")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if err := auth.ValidUser(name, wire.Role(role)); err != nil {
			return c.usagef("%v", err)
		}
		if file == "" {
			file = name + ".creds"
		}
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (wire.CredsReply, error) {
			return cl.IssueCredential(ctx, name, wire.Role(role))
		}, func(reply wire.CredsReply) error {
			if err := os.WriteFile(file, []byte(reply.Creds), 0o600); err != nil {
				return fmt.Errorf("the credential was issued but not written (revoke it): %w", err)
			}
			fmt.Fprintf(out.stdout, "issued %s (%s), key %s: %s\n", name, role, reply.Identity.Key, file)
			return nil
		})
	}
	return c
}

// credsListCmd is `toolgate creds list`.
func credsListCmd(out cliOutput) *cliCmd {
	c := newCLICmd("creds list", "creds list [--json] [flags]", "List the credentials toolgate issued, revoked ones too.", out).connFlags().jsonFlag("the identities")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		return call(ctx, c, func(ctx context.Context, cl *client.Client) ([]wire.Identity, error) {
			return cl.Credentials(ctx)
		}, func(ids []wire.Identity) error {
			tw := tabwriter.NewWriter(out.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tISSUED\tREVOKED\tKEY")
			for _, id := range ids {
				revoked := "-"
				if id.RevokedAt != 0 {
					revoked = time.UnixMilli(id.RevokedAt).UTC().Format(time.RFC3339) + " by " + id.RevokedBy
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id.Name, id.Role, time.UnixMilli(id.IssuedAt).UTC().Format(time.RFC3339), revoked, id.Key)
			}
			return tw.Flush()
		})
	}
	return c
}

// credsRevokeCmd is `toolgate creds revoke`.
func credsRevokeCmd(out cliOutput) *cliCmd {
	c := newCLICmd("creds revoke", "creds revoke NAME [flags]",
		"Revoke every credential of NAME: toolgate refuses its requests at once, and the\n"+
			"embedded NATS server disconnects it.", out).connFlags().jsonFlag("the identities revoked")
	c.run = callOn(c, "the identity's name", (*client.Client).RevokeCredential, func(ids []wire.Identity) error {
		for _, id := range ids {
			fmt.Fprintf(out.stdout, "revoked %s (%s), key %s\n", id.Name, id.Role, id.Key)
		}
		return nil
	})
	return c
}

// credsLocalCmd is `toolgate creds init` and `toolgate creds nats-config`,
// which work on a data directory's trust chain: init creates it,
// nats-config prints what nats-servers need (with --revoked, asking the
// running toolgate which credentials were revoked).
func credsLocalCmd(sub string, out cliOutput) *cliCmd {
	c := newCLICmd("creds "+sub, "creds "+sub+" [--data DIR] [--revoked]", "", out)
	var withRevoked bool
	if sub == "nats-config" {
		c.connFlags()
		c.fs.BoolVar(&withRevoked, "revoked", false, "ask the toolgate serving at --nats for the revoked credentials, which the servers then refuse")
	} else {
		c.fs.StringVar(&c.data, "data", server.DefaultConfig().Data, "the data directory")
	}
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		data := &c.data
		if sub == "init" {
			if err := server.InitTrust(*data); err != nil {
				return err
			}
			fmt.Fprintf(out.stdout, "credentials in %s\n", filepath.Dir(server.CredsPath(*data, "x")))
			return nil
		}
		var revoked []string
		if withRevoked {
			err := c.withClient(ctx, func(ctx context.Context, cl *client.Client) error {
				ids, err := cl.Credentials(ctx)
				for _, id := range ids {
					if id.RevokedAt != 0 {
						revoked = append(revoked, id.Key)
					}
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		conf, err := server.NATSConfig(*data, revoked)
		if err != nil {
			return err
		}
		_, err = fmt.Fprint(out.stdout, conf)
		return err
	}
	return c
}

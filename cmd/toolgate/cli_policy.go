package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// policyGetCmd is `toolgate policy get`.
func policyGetCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy get", "policy get [--json] [--show-secrets] [flags]",
		"Print the policy document in force, as YAML (which `policy set` reads back). Secrets given\n"+
			"as values (a channel's secret, a Slack channel's url) print as \""+policy.RedactedValue+"\", which `policy set`\n"+
			"refuses; references to them (env:NAME, file:PATH) print as they are. --show-secrets\n"+
			"(admins only) prints the values.", out).connFlags().jsonFlag("the document")
	var showSecrets bool
	c.fs.BoolVar(&showSecrets, "show-secrets", false, "print secret values instead of \""+policy.RedactedValue+"\" (admins only)")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return c.withClient(ctx, func(ctx context.Context, cl *client.Client) error {
			stored, err := cl.GetPolicy(ctx, wire.PolicyGetRequest{ShowSecrets: showSecrets})
			if err != nil {
				return err
			}
			if stored.Revision == 0 {
				fmt.Fprintln(out.stderr, "no policy stored: the built-in defaults apply (every call asks)")
			}
			if !showSecrets && strings.Contains(stored.Document, policy.RedactedValue) {
				fmt.Fprintln(out.stderr, "secrets are redacted: `policy set` refuses this document as it is; give the secrets, or env:NAME / file:PATH references, or print them with --show-secrets (admins only)")
			}
			if c.json {
				// Decode, not Parse: a redacted document does not validate.
				doc, err := policy.Decode([]byte(stored.Document))
				if err != nil {
					return err
				}
				return cliPrintJSON(out.stdout, doc)
			}
			_, err = io.WriteString(out.stdout, stored.Document)
			return err
		})
	}
	return c
}

// policySetCmd is `toolgate policy set`.
func policySetCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy set", "policy set FILE [flags]",
		"Put the policy document in FILE (YAML or JSON; - reads stdin) in force on every toolgate\n"+
			"replica at once. An invalid document is refused, naming each field at fault, and the\n"+
			"policy in force stays as it was.", out).connFlags()
	c.run = storePolicy(c, (*client.Client).SetPolicy, func(file string, _ wire.PolicyDocument) error {
		_, err := fmt.Fprintf(out.stdout, "policy from %s in force\n", file)
		return err
	})
	return c
}

// storePolicy is the run of `policy set FILE` and `policy shadow set
// FILE`: it checks the document in FILE offline, stores it with store (a
// method of the client), and says so with stored.
func storePolicy(c *cliCmd, store func(cl *client.Client, ctx context.Context, document string) (wire.PolicyDocument, error), stored func(file string, doc wire.PolicyDocument) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "the policy FILE")
		if err != nil {
			return err
		}
		file := pos[0]
		data, err := readPolicy(file)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (wire.PolicyDocument, error) {
			doc, err := store(cl, ctx, string(data))
			if err != nil {
				return doc, fmt.Errorf("%s: %w", file, err)
			}
			return doc, nil
		}, func(doc wire.PolicyDocument) error { return stored(file, doc) })
	}
}

// policyValidateCmd is `toolgate policy validate`.
func policyValidateCmd(out cliOutput) *cliCmd {
	c := newCLICmd("policy validate", "policy validate FILE",
		"Check a policy document offline: every field, rule pattern and template. Exit 1, naming\n"+
			"each field at fault, when it is invalid.", out)
	c.run = func(_ context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "the policy FILE")
		if err != nil {
			return err
		}
		if _, err := readPolicy(pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(out.stdout, "%s: valid\n", pos[0])
		return nil
	}
	return c
}

// readPolicy reads and checks a policy document; "-" is stdin.
func readPolicy(file string) ([]byte, error) {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	if _, err := policy.Parse(data); err != nil { // Parse validates, too
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return data, nil
}

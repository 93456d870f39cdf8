package main

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/policy"
)

// webhookSecretCmd is `toolgate webhook-secret`. It talks to no toolgate:
// a secret is made where it is kept, and reaches the policy as a value or
// a reference.
func webhookSecretCmd(out cliOutput) *cliCmd {
	c := newCLICmd("webhook-secret", "webhook-secret",
		"Print a new signing secret for a webhook channel: whsec_ and 32 random bytes in\n"+
			"base64, the form Standard Webhooks libraries take. Give it to the receiver, and to\n"+
			"the channel's secrets in the policy (as a value, or an env: or file: reference\n"+
			"to where it is kept). To rotate, add the new secret beside the old, move the\n"+
			"receiver to it, then remove the old.", out)
	c.run = func(_ context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		_, err := fmt.Fprintln(out.stdout, policy.NewWebhookSecret())
		return err
	}
	return c
}

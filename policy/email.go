package policy

import (
	"fmt"
	"net/mail"
	"net/url"
	"strings"
)

// An email channel sends each notification by SMTP to the addresses it
// names: its url is the SMTP server, smtp://host[:port] (STARTTLS, which
// the server must offer; port 587 unless given) or smtps://host[:port]
// (TLS from the first byte; port 465 unless given). Username and Secret,
// the password (a value or a reference, env:NAME), authenticate with
// AUTH PLAIN, only ever over TLS. This file holds what the policy says of
// it; the notifier (package worker) sends.

// maxEmailRecipients bounds an email channel's to list: each address
// gets a message of its own.
const maxEmailRecipients = 50

// SMTPAddress is where an email channel's server listens, host:port,
// and whether TLS starts at once (smtps) rather than by STARTTLS (smtp).
func (c Channel) SMTPAddress() (addr string, implicitTLS bool, err error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" || u.Opaque != "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", false, fmt.Errorf("want smtp://HOST[:PORT] (STARTTLS) or smtps://HOST[:PORT] (TLS), without a path, query or user (give username and secret)")
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "smtps":
		port = "465"
	default:
		port = "587"
	}
	return u.Hostname() + ":" + port, u.Scheme == "smtps", nil
}

// checkEmail checks what an email channel says, and that no other
// channel says what only an email channel may. at names a field of the
// channel. The url, unless a reference, is checkChannels' to hand here.
func checkEmail(errs *errorList, at func(string) string, c Channel) {
	if c.Type != ChannelEmail {
		if c.Type.Valid() {
			for _, f := range []struct {
				name string
				set  bool
			}{{"from", c.From != ""}, {"to", c.To != nil}, {"username", c.Username != ""}} {
				if f.set {
					errs.add(at(f.name), "only an email channel has %s", f.name)
				}
			}
		}
		return
	}
	if c.URL != RedactedValue && !IsSecretRef(c.URL) {
		if _, _, err := c.SMTPAddress(); err != nil {
			errs.add(at("url"), "%v", err)
		}
	}
	if _, err := mail.ParseAddress(c.From); err != nil {
		errs.add(at("from"), "want the address messages come from, such as toolgate@example.com or \"toolgate <toolgate@example.com>\": %v", err)
	}
	switch n := len(c.To); {
	case n == 0:
		errs.add(at("to"), "required: the addresses to send to")
	case n > maxEmailRecipients:
		errs.add(at("to"), "at most %d addresses, got %d", maxEmailRecipients, n)
	}
	seen := map[string]bool{}
	for i, a := range c.To {
		f := fmt.Sprintf("%s[%d]", at("to"), i)
		addr, err := mail.ParseAddress(a)
		switch {
		case err != nil || len(a) > 256:
			errs.add(f, "want an address such as alice@example.com, got %q", clipped(a))
		case seen[strings.ToLower(addr.Address)]:
			errs.add(f, "%q is listed twice", a)
		}
		if addr != nil {
			seen[strings.ToLower(addr.Address)] = true
		}
	}
	switch {
	case len(c.Username) > 256:
		errs.add(at("username"), "at most 256 bytes, got %d", len(c.Username))
	case c.Username != "" && c.Secret == "":
		errs.add(at("secret"), "required with username: the password to authenticate with (env:NAME)")
	case c.Username == "" && c.Secret != "":
		errs.add(at("username"), "required with secret: who authenticates with it")
	}
}

// clipped is s cut for an error message.
func clipped(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

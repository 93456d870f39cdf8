package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// RedactedValue stands for a secret in a redacted document (Redacted). A
// document that holds it where a secret goes is refused by Validate, so
// that a document read redacted and set again never replaces a secret with
// the placeholder.
const RedactedValue = "[redacted]"

// The prefixes of a secret reference.
const (
	SecretRefEnv  = "env:"
	SecretRefFile = "file:"
)

// maxSecretLen bounds a Channel.Secret, given or resolved.
const maxSecretLen = 1024

// maxSecretFile bounds what a file: reference reads: a secret is short, and
// a reference to a large file (a mistake, or a policy author fishing for a
// file the server can read) is refused rather than read.
const maxSecretFile = 8 << 10

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)

// IsSecretRef reports whether s is a secret reference (env:NAME or
// file:PATH) rather than a secret.
func IsSecretRef(s string) bool {
	return strings.HasPrefix(s, SecretRefEnv) || strings.HasPrefix(s, SecretRefFile)
}

// checkSecretRef says what is wrong with the reference ref, or "" when
// nothing is. It does not look the reference up: the process that checks a
// document (the one serving `policy set`) need not be the one that uses the
// secret (the notifier), and need not have its environment or files.
func checkSecretRef(ref string) string {
	if name, ok := strings.CutPrefix(ref, SecretRefEnv); ok {
		if !envNameRE.MatchString(name) {
			return fmt.Sprintf("reference %q: want env:NAME, NAME letters, digits and '_', not starting with a digit", ref)
		}
		return ""
	}
	p, _ := strings.CutPrefix(ref, SecretRefFile)
	switch {
	case p == "":
		return "reference \"file:\": want file:PATH, an absolute path"
	case !filepath.IsAbs(p):
		return fmt.Sprintf("reference %q: the path must be absolute: a relative one would depend on the server's working directory", ref)
	case filepath.Clean(p) != p:
		return fmt.Sprintf("reference %q: the path must be clean (no '..', '.', '//' or trailing '/'); want %q", ref, SecretRefFile+filepath.Clean(p))
	}
	return ""
}

// ResolveSecret returns the secret s stands for: the environment variable
// an env: reference names, the contents of the file a file: reference names
// (without trailing line breaks), or s itself when it is not a reference.
// A variable that is unset or empty, or a file that is missing, empty, not
// a regular file or larger than 8 KiB, is an error naming the reference,
// never its value.
func ResolveSecret(s string) (string, error) {
	if !IsSecretRef(s) {
		return s, nil
	}
	if msg := checkSecretRef(s); msg != "" {
		return "", errors.New("policy: secret " + msg)
	}
	if name, ok := strings.CutPrefix(s, SecretRefEnv); ok {
		v, set := os.LookupEnv(name)
		switch {
		case !set:
			return "", fmt.Errorf("policy: secret %s: the environment variable is not set", s)
		case v == "":
			return "", fmt.Errorf("policy: secret %s: the environment variable is empty", s)
		}
		return v, nil
	}
	v, err := readSecretFile(strings.TrimPrefix(s, SecretRefFile))
	if err != nil {
		return "", fmt.Errorf("policy: secret %s: %w", s, err)
	}
	return v, nil
}

func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		// The path is in the reference already; PathError would say it twice.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		// A FIFO or device would block the reader or never end.
		return "", errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("larger than %d bytes", maxSecretFile)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", errors.New("the file is empty")
	}
	return v, nil
}

// ResolveChannel returns c with its URL, Secret and Secrets resolved
// (ResolveSecret) and checked as Validate checks ones given in the
// document: a reference that leads to a URL that is not one, to a secret
// too long, or to a webhook's whsec_ secret with a malformed key, is an
// error. Errors name the field and the reference, never the value.
func ResolveChannel(c Channel) (Channel, error) {
	var err error
	r := c
	if r.URL, err = ResolveSecret(c.URL); err != nil {
		return Channel{}, fmt.Errorf("url: %w", err)
	}
	if r.Secret, err = ResolveSecret(c.Secret); err != nil {
		return Channel{}, fmt.Errorf("secret: %w", err)
	}
	switch {
	case !IsSecretRef(c.URL):
	case c.Type == ChannelEmail:
		if _, _, err := r.SMTPAddress(); err != nil {
			return Channel{}, fmt.Errorf("url: policy: secret %s: %v", c.URL, err)
		}
	default:
		if msg := checkHTTPURL(r.URL); msg != "" {
			return Channel{}, fmt.Errorf("url: policy: secret %s: %s", c.URL, msg)
		}
	}
	if IsSecretRef(c.Secret) && len(r.Secret) > maxSecretLen {
		return Channel{}, fmt.Errorf("secret: policy: secret %s: at most %d bytes, got %d", c.Secret, maxSecretLen, len(r.Secret))
	}
	if IsSecretRef(c.Secret) && c.Type == ChannelWebhook {
		if err := resolveWebhookKey(c.Secret, r.Secret); err != nil {
			return Channel{}, fmt.Errorf("secret: %w", err)
		}
	}
	if r.SigningSecret, err = ResolveSecret(c.SigningSecret); err != nil {
		return Channel{}, fmt.Errorf("signingSecret: %w", err)
	}
	if IsSecretRef(c.SigningSecret) && len(r.SigningSecret) > maxSecretLen {
		return Channel{}, fmt.Errorf("signingSecret: policy: secret %s: at most %d bytes, got %d", c.SigningSecret, maxSecretLen, len(r.SigningSecret))
	}
	if c.Secrets != nil {
		// A new list: c's is the policy's, shared with every reader.
		r.Secrets = make([]string, len(c.Secrets))
	}
	for i, s := range c.Secrets {
		if r.Secrets[i], err = ResolveSecret(s); err != nil {
			return Channel{}, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		if !IsSecretRef(s) {
			continue
		}
		if len(r.Secrets[i]) > maxSecretLen {
			return Channel{}, fmt.Errorf("secrets[%d]: policy: secret %s: at most %d bytes, got %d", i, s, maxSecretLen, len(r.Secrets[i]))
		}
		if err := resolveWebhookKey(s, r.Secrets[i]); err != nil {
			return Channel{}, fmt.Errorf("secrets[%d]: %w", i, err)
		}
	}
	return r, nil
}

// secretURL reports whether a channel's URL is a secret: a Slack incoming
// webhook's is (whoever has it can post to the channel). A webhook's or an
// ntfy server's URL says where deliveries go and stays readable; one that
// carries a credential should be given as a reference.
func secretURL(t ChannelType) bool { return t == ChannelSlack }

// Redacted returns a copy of d in which every secret given as a value is
// RedactedValue: each channel's secret, and a Slack channel's URL.
// References (env:, file:) are kept: they say where a secret is, not what
// it is. Every read of the policy but an admin's asking for the secrets
// shows this.
func Redacted(d *Document) *Document {
	c := d.Clone()
	redact := func(p *Policy) {
		if p == nil {
			return
		}
		for i := range p.Notify {
			ch := &p.Notify[i]
			if ch.Secret != "" && !IsSecretRef(ch.Secret) {
				ch.Secret = RedactedValue
			}
			for j, s := range ch.Secrets {
				if s != "" && !IsSecretRef(s) {
					ch.Secrets[j] = RedactedValue
				}
			}
			if ch.SigningSecret != "" && !IsSecretRef(ch.SigningSecret) {
				ch.SigningSecret = RedactedValue
			}
			if secretURL(ch.Type) && ch.URL != "" && !IsSecretRef(ch.URL) {
				ch.URL = RedactedValue
			}
		}
		for i := range p.Reviewers {
			if rv := &p.Reviewers[i]; rv.Secret != "" && !IsSecretRef(rv.Secret) {
				rv.Secret = RedactedValue
			}
		}
	}
	redact(c.Default)
	for _, p := range c.Teams {
		redact(p)
	}
	for _, p := range c.Conversations {
		redact(p)
	}
	return c
}

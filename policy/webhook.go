package policy

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// A webhook channel's deliveries are signed as Standard Webhooks
// (https://www.standardwebhooks.com) sign them: HMAC-SHA256, keyed with
// each of the channel's secrets, of "<webhook-id>.<webhook-timestamp>.<body>".
// This file holds what the policy says of those secrets; the notifier
// (package worker) signs.

// WebhookSecretPrefix begins a Standard Webhooks secret: "whsec_" and the
// key in standard base64, which is what the receivers' libraries take.
const WebhookSecretPrefix = "whsec_"

// The length of the key a whsec_ secret holds, in bytes, as the Standard
// Webhooks spec asks of a secret (24 to 64).
const (
	minWebhookKey = 24
	maxWebhookKey = 64
	// newWebhookKey is the length of the keys NewWebhookSecret makes.
	newWebhookKey = 32
)

// maxWebhookSecrets bounds a webhook's secrets. Each signs every delivery;
// a rotation needs two at a time.
const maxWebhookSecrets = 8

// NewWebhookSecret returns a new random Standard Webhooks secret: "whsec_"
// and 32 random bytes in standard base64.
func NewWebhookSecret() string {
	key := make([]byte, newWebhookKey)
	_, _ = rand.Read(key) // never fails: it crashes the program instead
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// WebhookKey returns the HMAC key a webhook secret, resolved, stands for:
// the key a whsec_ secret holds, base64-decoded, or the bytes of any other
// secret as written (one from before toolgate signed as Standard Webhooks:
// a receiver gives it to its library as a raw key).
func WebhookKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, WebhookSecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	switch {
	case err != nil:
		return nil, fmt.Errorf("a %s secret must be followed by its key in standard base64: %v", WebhookSecretPrefix, err)
	case len(key) < minWebhookKey || len(key) > maxWebhookKey:
		return nil, fmt.Errorf("a %s secret's key must be %d to %d bytes, got %d", WebhookSecretPrefix, minWebhookKey, maxWebhookKey, len(key))
	}
	return key, nil
}

// WebhookFormat is what a webhook channel's body is.
type WebhookFormat string

// FormatCloudEvents sends each event as a structured CloudEvent 1.0
// (wire.StructuredCloudEvent).
const FormatCloudEvents WebhookFormat = "cloudevents"

// SigningSecrets are the secrets, as written (values or references), that
// sign a webhook channel's deliveries: Secret, if given, then Secrets.
func (c Channel) SigningSecrets() []string {
	var s []string
	if c.Secret != "" {
		s = append(s, c.Secret)
	}
	return append(s, c.Secrets...)
}

// checkWebhook checks what only a webhook channel may say: its secrets
// (the list, and the form of a whsec_ one given as a value) and
// legacySignature. at names a field of the channel. That a webhook has a
// secret at all, and Secret's own checks, are checkChannels'.
func checkWebhook(errs *errorList, at func(string) string, c Channel) {
	if c.LegacySignature && c.Type != ChannelWebhook && c.Type.Valid() {
		errs.add(at("legacySignature"), "only a webhook's deliveries are signed")
	}
	switch {
	case c.Format != "" && c.Format != FormatCloudEvents:
		errs.add(at("format"), "must be cloudevents, or absent for toolgate's envelope, got %q", string(c.Format))
	case c.Format != "" && c.Type != ChannelWebhook && c.Type.Valid():
		errs.add(at("format"), "only a webhook's body has a format")
	}
	if c.Type != ChannelWebhook {
		if len(c.Secrets) > 0 && c.Type.Valid() {
			errs.add(at("secrets"), "only a webhook has several secrets (its signing keys); give an ntfy access token as secret")
		}
		return
	}
	if len(c.Secrets) > maxWebhookSecrets {
		errs.add(at("secrets"), "at most %d secrets, got %d", maxWebhookSecrets, len(c.Secrets))
	}
	if c.Secret != "" && c.Secret != RedactedValue && !IsSecretRef(c.Secret) && len(c.Secret) <= maxSecretLen {
		if _, err := WebhookKey(c.Secret); err != nil {
			errs.add(at("secret"), "%v", err)
		}
	}
	seen := map[string]string{}
	if c.Secret != "" && c.Secret != RedactedValue {
		seen[c.Secret] = "secret"
	}
	for i, s := range c.Secrets {
		field := fmt.Sprintf("secrets[%d]", i)
		switch {
		case s == "":
			errs.add(at(field), "must not be empty")
		case s == RedactedValue:
			errs.add(at(field), "%s", redactedMsg)
		case IsSecretRef(s):
			if msg := checkSecretRef(s); msg != "" {
				errs.add(at(field), "%s", msg)
			}
		case len(s) > maxSecretLen:
			errs.add(at(field), "at most %d bytes, got %d", maxSecretLen, len(s))
		default:
			if _, err := WebhookKey(s); err != nil {
				errs.add(at(field), "%v", err)
			}
		}
		if s == "" || s == RedactedValue {
			continue
		}
		if other, ok := seen[s]; ok {
			// Not quoted: it is a secret.
			errs.add(at(field), "the same secret as %s", other)
		} else {
			seen[s] = field
		}
	}
}

// resolveWebhookKey is WebhookKey of a secret given as a reference, whose
// form Validate could not check.
func resolveWebhookKey(ref, resolved string) error {
	if _, err := WebhookKey(resolved); err != nil {
		return fmt.Errorf("policy: secret %s: %v", ref, err)
	}
	return nil
}

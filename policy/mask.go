package policy

import (
	"bytes"
	"encoding/json"
	"path"
	"regexp"
	"strings"
)

// What people are shown of a call's arguments: every value under a key
// that names a secret, or that a policy's redact pattern names, and every
// part of a string shaped like a known credential, replaced by
// RedactedValue. The executor and the agent that asked get the arguments
// as they are; the roles the policy's reveal names may ask for them.

// secretKeys are argument names whose values are secrets, compared with
// '-' taken as '_' and case ignored.
var secretKeys = map[string]bool{
	"password": true, "passwd": true, "secret": true, "client_secret": true, "token": true,
	"access_token": true, "refresh_token": true, "id_token": true, "api_key": true, "apikey": true,
	"authorization": true, "proxy_authorization": true, "private_key": true, "cookie": true, "set_cookie": true,
	"x_api_key": true,
}

// secretShapes are credentials recognisable by their form wherever they
// appear in a string, e.g. inside a command line.
var secretShapes = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]{8,}=*`),
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`),                                   // OpenAI, Anthropic
	regexp.MustCompile(`\b(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}`),                  // GitHub tokens
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}`),                            // GitHub fine-grained
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),                            // Slack
	regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`),                               // AWS access key ids
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+`), // JWTs
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`),
	regexp.MustCompile(`(?i)\b(password|passwd|token|secret|api[_-]?key)=[^\s&'"]+`),
}

// Masker masks a call's arguments for whoever may not see its secrets.
type Masker struct {
	patterns []string // the policy's redact patterns (see Policy.Redact)
	reveal   []string // the policy's reveal roles; nil: DefaultReveal
}

// DefaultReveal are the roles that may reveal a call's arguments where
// the policy's reveal says nothing.
var DefaultReveal = []string{"admin"}

// Reveal returns the roles that may ask for a call's arguments in clear
// (Policy.Reveal): none when the policy's list is empty.
func (m Masker) Reveal() []string {
	if m.reveal == nil {
		return DefaultReveal
	}
	return m.reveal
}

// Mask returns args with every secret in it replaced by RedactedValue,
// and whether anything was. Arguments that are not JSON are returned as
// they are, and so is what has no secret in it.
func (m Masker) Mask(args json.RawMessage) (json.RawMessage, bool) {
	if len(bytes.TrimSpace(args)) == 0 {
		return args, false
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return args, false
	}
	v, masked := m.mask("$", "", v)
	if !masked {
		return args, false
	}
	out, err := json.Marshal(v)
	if err != nil {
		return args, false
	}
	return out, true
}

func (m Masker) mask(at, key string, v any) (any, bool) {
	if key != "" && m.secretKey(at, key) {
		if v == nil {
			return v, false
		}
		return RedactedValue, true
	}
	masked := false
	switch x := v.(type) {
	case map[string]any:
		for k, w := range x {
			nw, ok := m.mask(at+"."+k, k, w)
			if ok {
				x[k], masked = nw, true
			}
		}
	case []any:
		for i, w := range x {
			nw, ok := m.mask(at+"[*]", "", w)
			if ok {
				x[i], masked = nw, true
			}
		}
	case string:
		s := x
		for _, re := range secretShapes {
			s = re.ReplaceAllStringFunc(s, maskShape)
		}
		if s != x {
			return s, true
		}
	}
	return v, masked
}

// maskShape keeps what names a credential (the scheme, the parameter)
// and masks the credential.
func maskShape(s string) string {
	for _, sep := range []string{" ", "="} {
		if name, _, ok := strings.Cut(s, sep); ok && !strings.HasPrefix(s, "-----") {
			return name + sep + RedactedValue
		}
	}
	return RedactedValue
}

// secretKey reports whether the value at path at, under key, is a secret:
// key names one, or a redact pattern matches the path ("$.headers.X-Key",
// "$.*.token") or the key ("*token*").
func (m Masker) secretKey(at, key string) bool {
	if secretKeys[strings.ReplaceAll(strings.ToLower(key), "-", "_")] {
		return true
	}
	for _, p := range m.patterns {
		if strings.HasPrefix(p, "$") {
			if ok, _ := path.Match(strings.ToLower(strings.ReplaceAll(p, ".", "/")), strings.ToLower(strings.ReplaceAll(at, ".", "/"))); ok {
				return true
			}
		} else if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(key)); ok {
			return true
		}
	}
	return false
}

// UnmaskEdit gives an approver's edit of masked arguments the secrets it
// was shown masked: every RedactedValue at a path where original has a
// value takes that value back. What the approver changed stays changed.
func UnmaskEdit(edit, original json.RawMessage) json.RawMessage {
	if !bytes.Contains(edit, []byte(RedactedValue)) {
		return edit
	}
	var e, o any
	d := json.NewDecoder(bytes.NewReader(edit))
	d.UseNumber()
	if d.Decode(&e) != nil {
		return edit
	}
	d = json.NewDecoder(bytes.NewReader(original))
	d.UseNumber()
	if d.Decode(&o) != nil {
		return edit
	}
	out, err := json.Marshal(unmask(e, o))
	if err != nil {
		return edit
	}
	return out
}

func unmask(e, o any) any {
	switch x := e.(type) {
	case string:
		if orig, ok := o.(string); ok && strings.Contains(x, RedactedValue) {
			// A whole value masked, or credentials masked inside a
			// string the approver left as it was shown.
			if x == RedactedValue {
				return o
			}
			if shown, _ := (Masker{}).mask("$", "", orig); shown == x {
				return orig
			}
		}
		if x == RedactedValue && o != nil {
			return o
		}
	case map[string]any:
		om, _ := o.(map[string]any)
		for k, w := range x {
			x[k] = unmask(w, om[k])
		}
	case []any:
		oa, _ := o.([]any)
		for i, w := range x {
			if i < len(oa) {
				x[i] = unmask(w, oa[i])
			}
		}
	}
	return e
}

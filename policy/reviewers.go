package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// A scope's reviewers list names automated reviewers of the calls the
// policy asks a human about: an HTTP endpoint (url, each request signed
// as a webhook's deliveries are, with secret) or a NATS subject (nats)
// that the team runs, which is sent each asked call its match covers
// and answers approve, reject, escalate or abstain. A reviewer only
// narrows: it may approve only the calls its mayApprove covers (matched
// as allow rules match: every command of a Bash line), and never one a
// deny rule, a quorum or a high risk reserves for humans; it may always
// reject, or escalate to humans. Like notify, the narrowest scope that
// sets the list wins ("reviewers: []" turns them off for a team).

// Reviewer is one entry of a scope's reviewers list.
type Reviewer struct {
	// Name names the reviewer: it decides as reviewer:<name>, and
	// metrics and analytics count it by it.
	Name string `yaml:"name" json:"name"`
	// Match are the calls it reviews, patterns in rule syntax; a call
	// any of them matches is sent to it.
	Match Names `yaml:"match" json:"match"`
	// URL is the HTTP endpoint it answers on (or a reference to it,
	// env:/file:); Secret signs each request.
	URL    string `yaml:"url,omitempty" json:"url,omitempty"`
	Secret string `yaml:"secret,omitempty" json:"secret,omitempty"`
	// NATS is the subject it answers requests on, on toolgate's own
	// NATS connection.
	NATS string `yaml:"nats,omitempty" json:"nats,omitempty"`
	// TimeoutMs is how long it has to answer (default
	// DefaultReviewerTimeout); no answer by then leaves the call to
	// humans.
	TimeoutMs *int64 `yaml:"timeoutMs,omitempty" json:"timeoutMs,omitempty"`
	// MayApprove are the calls it may approve, patterns in rule syntax;
	// none: it may only reject and escalate.
	MayApprove Names `yaml:"mayApprove,omitempty" json:"mayApprove,omitzero"`
}

// Reviewers is a scope's reviewers list. Like Names, it is its own type
// so that an explicit empty list survives Marshal.
type Reviewers []Reviewer

// IsZero reports whether the list is unset, for yaml's omitempty and json's omitzero.
func (r Reviewers) IsZero() bool { return r == nil }

// Bounds of a reviewers list.
const (
	// maxReviewers bounds a scope's list: each asked call may be sent to
	// every reviewer that matches it.
	maxReviewers = 8
	// maxReviewerPatterns bounds match and mayApprove.
	maxReviewerPatterns = 32
	// DefaultReviewerTimeout is how long a reviewer has to answer when
	// its timeoutMs is not set; MaxReviewerTimeout the longest it may
	// be given.
	DefaultReviewerTimeout = 10 * time.Second
	MaxReviewerTimeout     = 60 * time.Second
	minReviewerTimeoutMs   = 100
)

// ReviewerNameRE is what a reviewer's name may be: it is a metric label,
// and follows reviewer: in the name it decides as.
var ReviewerNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// natsSubjectRE is a subject of plain tokens, no wildcards.
var natsSubjectRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// CompiledReviewer is a reviewer as Resolved holds it: its patterns
// compiled, and its timeout.
type CompiledReviewer struct {
	Reviewer
	Timeout    time.Duration
	match      []Pattern
	mayApprove []Pattern
	Scope      string
}

// compileReviewers checks a scope's reviewers list and compiles its
// patterns.
func compileReviewers(errs *errorList, scope string, list Reviewers) []CompiledReviewer {
	path := scope + ".reviewers"
	if len(list) > maxReviewers {
		errs.add(path, "at most %d reviewers, got %d", maxReviewers, len(list))
	}
	out := []CompiledReviewer{}
	seen := map[string]int{}
	for i, r := range list {
		at := func(field string) string { return fmt.Sprintf("%s[%d].%s", path, i, field) }
		c := CompiledReviewer{Reviewer: r, Timeout: DefaultReviewerTimeout, Scope: scope}
		ok := true
		switch j, dup := seen[r.Name]; {
		case !ReviewerNameRE.MatchString(r.Name):
			errs.add(at("name"), "must be 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit, got %q", r.Name)
			ok = false
		case dup:
			errs.add(at("name"), "%q names %s[%d] too: each reviewer's name is its own", r.Name, path, j)
			ok = false
		default:
			seen[r.Name] = i
		}
		patterns := func(field string, src Names, required bool) []Pattern {
			if required && len(src) == 0 {
				errs.add(at(field), "required: the calls the reviewer reviews, patterns in rule syntax (\"Bash\", \"WebFetch(domain:docs.*)\")")
				ok = false
			}
			if len(src) > maxReviewerPatterns {
				errs.add(at(field), "at most %d patterns, got %d", maxReviewerPatterns, len(src))
				ok = false
			}
			var pats []Pattern
			for k, s := range src {
				p, err := parsePattern(s)
				if err != nil {
					errs.add(fmt.Sprintf("%s[%d]", at(field), k), "%q: %v", s, err)
					ok = false
					continue
				}
				pats = append(pats, p)
			}
			return pats
		}
		c.match = patterns("match", r.Match, true)
		c.mayApprove = patterns("mayApprove", r.MayApprove, false)
		switch {
		case r.URL != "" && r.NATS != "":
			errs.add(fmt.Sprintf("%s[%d]", path, i), "give url or nats, not both")
			ok = false
		case r.URL == "" && r.NATS == "":
			errs.add(fmt.Sprintf("%s[%d]", path, i), "url or nats is required: where the reviewer answers")
			ok = false
		case r.NATS != "":
			if len(r.NATS) > 128 || !natsSubjectRE.MatchString(r.NATS) || strings.HasPrefix(r.NATS, "toolgate.") || strings.HasPrefix(r.NATS, "tool.") {
				errs.add(at("nats"), "must be a NATS subject of at most 128 bytes, tokens of letters, digits, '-' and '_', no wildcards, outside toolgate's own (toolgate., tool.), got %q", r.NATS)
				ok = false
			}
			if r.Secret != "" {
				errs.add(at("secret"), "signs a url reviewer's requests; a nats reviewer is reached on toolgate's own connection")
				ok = false
			}
		default:
			if !checkReviewerSecret(errs, at, r) {
				ok = false
			}
			switch {
			case r.URL == RedactedValue:
				errs.add(at("url"), "%s", redactedMsg)
				ok = false
			case IsSecretRef(r.URL):
				if msg := checkSecretRef(r.URL); msg != "" {
					errs.add(at("url"), "%s", msg)
					ok = false
				}
			default:
				if msg := checkHTTPURL(r.URL); msg != "" {
					errs.add(at("url"), "%s", msg)
					ok = false
				}
			}
		}
		if t := r.TimeoutMs; t != nil {
			if *t < minReviewerTimeoutMs || *t > MaxReviewerTimeout.Milliseconds() {
				errs.add(at("timeoutMs"), "must be %d to %d, got %d", minReviewerTimeoutMs, MaxReviewerTimeout.Milliseconds(), *t)
				ok = false
			} else {
				c.Timeout = ms(*t)
			}
		}
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// checkReviewerSecret checks a url reviewer's secret, which signs its
// requests as a webhook's secret signs its deliveries.
func checkReviewerSecret(errs *errorList, at func(string) string, r Reviewer) bool {
	switch {
	case r.Secret == "":
		errs.add(at("secret"), "required for a url reviewer: each request is signed with it (webhook-signature), so the reviewer knows toolgate sent it; `toolgate webhook-secret` makes one")
	case r.Secret == RedactedValue:
		errs.add(at("secret"), "%s", redactedMsg)
	case IsSecretRef(r.Secret):
		if msg := checkSecretRef(r.Secret); msg != "" {
			errs.add(at("secret"), "%s", msg)
		} else {
			return true
		}
	case len(r.Secret) > maxSecretLen:
		errs.add(at("secret"), "at most %d bytes, got %d", maxSecretLen, len(r.Secret))
	default:
		if _, err := WebhookKey(r.Secret); err != nil {
			errs.add(at("secret"), "%v", err)
		} else {
			return true
		}
	}
	return false
}

// Reviews reports whether the reviewer reviews a call of tool with
// arguments raw (its match covers it, as an ask rule would: any command
// of a Bash line; a specifier that cannot read its argument matches).
func (r *Resolved) Reviews(rv CompiledReviewer, tool string, raw json.RawMessage) bool {
	args, err := callArguments(machine.Call{ToolName: tool, Arguments: raw})
	if err != nil {
		args = map[string]any{}
	}
	cs := newCallSubject(tool, args, r.ArgumentOf(tool))
	return slices.ContainsFunc(rv.match, func(p Pattern) bool { return p.matchCall(cs, false) })
}

// MayApprove returns the mayApprove pattern of rv that lets it approve a
// call of tool with arguments raw, matched as an allow rule is (every
// command of a Bash line, never a line no rule can see through, nor
// arguments that are not a JSON object), and false when none does.
func (r *Resolved) MayApprove(rv CompiledReviewer, tool string, raw json.RawMessage) (string, bool) {
	args, err := callArguments(machine.Call{ToolName: tool, Arguments: raw})
	if err != nil {
		return "", false
	}
	cs := newCallSubject(tool, args, r.ArgumentOf(tool))
	if cs.hidden {
		return "", false
	}
	for _, p := range rv.mayApprove {
		if p.matchCall(cs, true) {
			return p.String(), true
		}
	}
	return "", false
}

// Reviewer returns the reviewer of this policy named name.
func (r *Resolved) Reviewer(name string) (CompiledReviewer, bool) {
	i := slices.IndexFunc(r.Reviewers, func(c CompiledReviewer) bool { return c.Name == name })
	if i < 0 {
		return CompiledReviewer{}, false
	}
	return r.Reviewers[i], true
}

// ResolveReviewer returns rv with its URL and Secret resolved
// (ResolveSecret) and the secret's form checked.
func ResolveReviewer(rv CompiledReviewer) (CompiledReviewer, error) {
	var err error
	r := rv
	if r.URL, err = ResolveSecret(rv.URL); err != nil {
		return CompiledReviewer{}, fmt.Errorf("url: %w", err)
	}
	if r.URL != "" {
		if msg := checkHTTPURL(r.URL); msg != "" {
			return CompiledReviewer{}, fmt.Errorf("url: policy: %s: %s", rv.URL, msg)
		}
	}
	if r.Secret, err = ResolveSecret(rv.Secret); err != nil {
		return CompiledReviewer{}, fmt.Errorf("secret: %w", err)
	}
	if IsSecretRef(rv.Secret) {
		if err := resolveWebhookKey(rv.Secret, r.Secret); err != nil {
			return CompiledReviewer{}, fmt.Errorf("secret: %w", err)
		}
	}
	return r, nil
}

// cloneReviewers copies a reviewers list deeply.
func cloneReviewers(list Reviewers) Reviewers {
	c := slices.Clone(list)
	for i := range c {
		c[i].Match = slices.Clone(c[i].Match)
		c[i].MayApprove = slices.Clone(c[i].MayApprove)
		c[i].TimeoutMs = clonePtr(c[i].TimeoutMs)
	}
	return c
}

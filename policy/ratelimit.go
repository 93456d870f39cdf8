package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// A scope's rateLimits cap how often the calls a pattern matches may be
// attempted, counted across the whole swarm:
//
//	rateLimits:
//	  - {match: "Bash(rm *)", max: 3, per: 10m, scope: team, then: ask}
//
// Each rule counts, in a sliding window of its last `per`, the calls it
// matched that got past the deny rules and plan mode, per team (the
// default), conversation, caller, or all calls together. A matching call
// takes a slot while fewer than max are taken in the window and then goes
// on through the rest of the evaluation; once max are taken, the next
// matching call gets the rule's then (ask, the default, or deny) instead,
// and takes no slot. Like the permission rules, the scopes' lists add up,
// the narrowest scope's first; every rule that matches a call takes a
// slot, in that order, until one has none left. The counters are a
// RateCounter's (bus keeps them in KV, changed by compare-and-set).

// RateLimit is one entry of a scope's rateLimits, as written.
type RateLimit struct {
	// Match is a pattern in rule syntax ("Bash(rm *)", "transfer_funds"),
	// matched as a deny or ask rule is (a Bash line if any of its
	// commands matches).
	Match string `yaml:"match" json:"match"`
	// Max is how many matching calls the window holds (1 to MaxRateLimit).
	Max int `yaml:"max" json:"max"`
	// Per is the window: a duration such as 30s, 10m or 1h (1s to 24h).
	Per string `yaml:"per" json:"per"`
	// Scope is what is counted apart: team (default), conversation,
	// caller, or all.
	Scope RateScope `yaml:"scope,omitempty" json:"scope,omitempty"`
	// Then is what a call gets once the window is full: ask (default) or deny.
	Then machine.Action `yaml:"then,omitempty" json:"then,omitempty"`
}

// RateScope is what a rate rule counts apart.
type RateScope string

// The rate scopes.
const (
	RateByTeam         RateScope = "team"         // each team's calls (the default)
	RateByConversation RateScope = "conversation" // each conversation's calls
	RateByCaller       RateScope = "caller"       // each caller's (agent's) calls
	RateByAll          RateScope = "all"          // every call the rule applies to, together
)

var rateScopes = []RateScope{RateByTeam, RateByConversation, RateByCaller, RateByAll}

// Bounds of a rate rule.
const (
	// MaxRateLimit bounds max: a counter holds the time of each slot taken.
	MaxRateLimit = 1000
	// MinRatePer and MaxRatePer bound per. Counters live in a bucket whose
	// values expire a while after MaxRatePer.
	MinRatePer = time.Second
	MaxRatePer = 24 * time.Hour
	// maxRateLimits bounds a scope's list: each rule that matches a call
	// is a write on the bus.
	maxRateLimits = 64
)

// RateRule is a rate rule compiled, as Resolved holds it.
type RateRule struct {
	Index   int // in its scope's list
	Pattern Pattern
	Max     int
	Per     time.Duration
	PerText string // per as written ("10m")
	Scope   RateScope
	Then    machine.Action
	// Source is the scope of the document the rule is in (default,
	// teams.ops, conversations.c1).
	Source string
	// ID names the rule's counters: a digest of its source, match,
	// scope and per, so that reordering the list or changing max or then
	// keeps the counts, and a changed window starts afresh.
	ID string
}

// String names the rule as verdict reasons do: rateLimits[0] "Bash(rm *)" (teams.ops).
func (r RateRule) String() string {
	return fmt.Sprintf("rateLimits[%d] %q (%s)", r.Index, r.Pattern.String(), r.Source)
}

// RateKey names one counter: a rule's, for one team, conversation or
// caller (Value), or for all its calls (Scope all, Value "").
type RateKey struct {
	Rule  string // RateRule.ID
	Scope RateScope
	Value string
}

// Who says whose calls the counter counts: "team ops", "caller bot-1", "all calls".
func (k RateKey) Who() string {
	if k.Scope == RateByAll {
		return "all calls"
	}
	v := k.Value
	if v == "" {
		v = `""`
	}
	return string(k.Scope) + " " + v
}

// Key is the counter of this rule that counts c.
func (r RateRule) Key(c machine.Call) RateKey {
	k := RateKey{Rule: r.ID, Scope: r.Scope}
	switch r.Scope {
	case RateByTeam:
		k.Value = c.Team
	case RateByConversation:
		k.Value = c.ConversationID
	case RateByCaller:
		k.Value = c.CallerBotID
	}
	return k
}

// RateCounter counts the calls each rate rule lets through. bus
// implements it on NATS KV.
type RateCounter interface {
	// Take takes a slot of key's window, the per before now, if fewer
	// than max are taken in it; it must be atomic: of calls racing for
	// the last slot, one gets it. count is the slots taken in the window,
	// the one taken included.
	Take(ctx context.Context, key RateKey, max int, per time.Duration, now time.Time) (taken bool, count int, err error)
}

// WithRateCounter gives an Engine the counters of its rate rules. Without
// one, a call a rate rule matches gets the rule's then, since nothing can
// count it.
func WithRateCounter(c RateCounter) EngineOption { return func(e *Engine) { e.rates = c } }

// compileRateLimits checks a scope's rateLimits and compiles them.
func compileRateLimits(errs *errorList, scope string, list []RateLimit) []RateRule {
	path := scope + ".rateLimits"
	if len(list) > maxRateLimits {
		errs.add(path, "at most %d rate rules, got %d", maxRateLimits, len(list))
		return nil
	}
	var out []RateRule
	seen := map[string]int{}
	for i, rl := range list {
		at := func(field string) string { return fmt.Sprintf("%s[%d].%s", path, i, field) }
		ok := true
		fail := func(field, format string, args ...any) {
			errs.add(at(field), format, args...)
			ok = false
		}
		pat, err := parsePattern(rl.Match)
		switch {
		case rl.Match == "":
			fail("match", `required: a pattern in rule syntax, such as "Bash(rm *)" or transfer_funds`)
		case err != nil:
			fail("match", "%q: %v", rl.Match, err)
		}
		if rl.Max < 1 || rl.Max > MaxRateLimit {
			fail("max", "must be 1 to %d, got %d", MaxRateLimit, rl.Max)
		}
		per, err := time.ParseDuration(rl.Per)
		switch {
		case rl.Per == "":
			fail("per", "required: a duration such as 30s, 10m or 1h")
		case err != nil:
			fail("per", "must be a duration such as 30s, 10m or 1h, got %q", rl.Per)
		case per < MinRatePer || per > MaxRatePer:
			fail("per", "must be %s to %s, got %q", MinRatePer, "24h", rl.Per)
		}
		scopeOf := rl.Scope
		if scopeOf == "" {
			scopeOf = RateByTeam
		} else if !slices.Contains(rateScopes, scopeOf) {
			fail("scope", "must be team, conversation, caller or all, got %q", string(rl.Scope))
		}
		then := rl.Then
		if then == "" {
			then = machine.ActionAsk
		} else if then != machine.ActionAsk && then != machine.ActionDeny {
			fail("then", "must be ask or deny, got %q", string(rl.Then))
		}
		if !ok {
			continue
		}
		id := rateRuleID(scope, rl.Match, scopeOf, per)
		if j, dup := seen[id]; dup {
			errs.add(fmt.Sprintf("%s[%d]", path, i), "counts the same calls as %s[%d] (the same match, scope and per): make it one rule", path, j)
			continue
		}
		seen[id] = i
		out = append(out, RateRule{Index: i, Pattern: pat, Max: rl.Max, Per: per, PerText: rl.Per,
			Scope: scopeOf, Then: then, Source: scope, ID: id})
	}
	return out
}

// rateRuleID is RateRule.ID: 20 hex digits, a valid KV key token.
func rateRuleID(source, match string, scope RateScope, per time.Duration) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d", source, match, scope, per))
	return hex.EncodeToString(sum[:10])
}

// rateLimit takes a slot of every rate rule that matches c, narrowest
// scope first, and returns the verdict of the first that has none left;
// limited is false when every one had a slot (or none matched). A dry
// evaluation counts nothing.
func (e *Engine) rateLimit(ctx context.Context, r *Resolved, c machine.Call, cs callSubject, dry bool) (v machine.Verdict, limited bool, err error) {
	if dry {
		return machine.Verdict{}, false, nil
	}
	for _, rule := range r.RateLimits {
		if !rule.Pattern.matchCall(cs, false) {
			continue
		}
		if e.rates == nil {
			return verdict(rule.Then, rule.String()+": no rate counter is configured to count calls"), true, nil
		}
		key := rule.Key(c)
		taken, n, err := e.rates.Take(ctx, key, rule.Max, rule.Per, e.now())
		if err != nil {
			return machine.Verdict{}, false, fmt.Errorf("%s: count %s: %w", rule, key.Who(), err)
		}
		if !taken {
			return verdict(rule.Then, fmt.Sprintf("%s: %d of %d in the last %s for %s",
				rule, n, rule.Max, rule.PerText, key.Who())), true, nil
		}
	}
	return machine.Verdict{}, false, nil
}

// RateRules returns every rate rule of the document in force, of every
// scope: the default's, then each team's and each conversation's, by name.
func (e *Engine) RateRules() []RateRule {
	c := e.snap.Load().c
	out := slices.Clone(c.def.rates)
	for _, name := range slices.Sorted(maps.Keys(c.teams)) {
		out = append(out, c.teams[name].rates...)
	}
	for _, id := range slices.Sorted(maps.Keys(c.convs)) {
		out = append(out, c.convs[id].rates...)
	}
	return out
}

// rateMatches are the patterns of a scope's rate rules, for the names a
// document names.
func rateMatches(list []RateLimit) []string {
	out := make([]string, 0, len(list))
	for _, rl := range list {
		out = append(out, rl.Match)
	}
	return out
}

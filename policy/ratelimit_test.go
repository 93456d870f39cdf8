package policy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/machine"
)

// memRates is an in-memory RateCounter: a sliding window per key, under a
// mutex, as the KV one is under compare-and-set.
type memRates struct {
	mu    sync.Mutex
	slots map[RateKey][]time.Time
	err   error
	takes []RateKey
}

func newMemRates() *memRates { return &memRates{slots: map[RateKey][]time.Time{}} }

func (m *memRates) Take(_ context.Context, key RateKey, limit int, per time.Duration, now time.Time) (bool, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return false, 0, m.err
	}
	m.takes = append(m.takes, key)
	var live []time.Time
	for _, t := range m.slots[key] {
		if now.Sub(t) < per {
			live = append(live, t)
		}
	}
	if len(live) >= limit {
		m.slots[key] = live
		return false, len(live), nil
	}
	m.slots[key] = append(live, now)
	return true, len(live) + 1, nil
}

func (m *memRates) count(key RateKey) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.slots[key])
}

const rateDocument = `
default:
  requiresApprovalTools: none
  rules:
    deny: ["Bash(rm -rf *)"]
    ask: ["Bash(rm -i *)"]
  rateLimits:
    - {match: "Bash(rm *)", max: 2, per: 10m}
    - {match: deploy, max: 1, per: 1h, scope: all, then: deny}
teams:
  ops:
    rateLimits:
      - {match: "Bash(rm *)", max: 3, per: 1m, scope: caller, then: deny}
`

func TestParse_RateLimitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"match missing", "teams:\n  ops:\n    rateLimits: [{max: 3, per: 10m}]",
			`policy: teams.ops.rateLimits[0].match: required: a pattern in rule syntax`},
		{"bad match", "default:\n  rateLimits: [{match: 'Bash(rm', max: 3, per: 10m}]",
			`policy: default.rateLimits[0].match: "Bash(rm": must end with ")"`},
		{"max zero", "default:\n  rateLimits: [{match: Bash, max: 0, per: 10m}]",
			`policy: default.rateLimits[0].max: must be 1 to 1000, got 0`},
		{"max missing", "default:\n  rateLimits: [{match: Bash, per: 10m}]",
			`policy: default.rateLimits[0].max: must be 1 to 1000, got 0`},
		{"max huge", "default:\n  rateLimits: [{match: Bash, max: 1001, per: 10m}]",
			`policy: default.rateLimits[0].max: must be 1 to 1000, got 1001`},
		{"max not a number", "default:\n  rateLimits: [{match: Bash, max: many, per: 10m}]",
			`policy: default.rateLimits[0].max: must be an integer, got "many"`},
		{"per missing", "teams:\n  ops:\n    rateLimits: [{match: Bash, max: 3}]",
			`policy: teams.ops.rateLimits[0].per: required: a duration such as 30s, 10m or 1h`},
		{"per unparsable", "teams:\n  ops:\n    rateLimits: [{match: Bash, max: 3, per: 10 minutes}]",
			`policy: teams.ops.rateLimits[0].per: must be a duration such as 30s, 10m or 1h, got "10 minutes"`},
		{"per too short", "default:\n  rateLimits: [{match: Bash, max: 3, per: 10ms}]",
			`policy: default.rateLimits[0].per: must be 1s to 24h, got "10ms"`},
		{"per too long", "default:\n  rateLimits: [{match: Bash, max: 3, per: 25h}]",
			`policy: default.rateLimits[0].per: must be 1s to 24h, got "25h"`},
		{"per negative", "default:\n  rateLimits: [{match: Bash, max: 3, per: -1m}]",
			`policy: default.rateLimits[0].per: must be 1s to 24h, got "-1m"`},
		{"scope", "conversations:\n  c1:\n    rateLimits: [{match: Bash, max: 3, per: 1m, scope: user}]",
			`policy: conversations.c1.rateLimits[0].scope: must be team, conversation, caller or all, got "user"`},
		{"then", "default:\n  rateLimits: [{match: Bash, max: 3, per: 1m, then: run}]",
			`policy: default.rateLimits[0].then: must be ask or deny, got "run"`},
		{"unknown field", "default:\n  rateLimits: [{match: Bash, max: 3, per: 1m, window: 1m}]",
			`policy: default.rateLimits[0].window: unknown field`},
		{"not a list", "default:\n  rateLimits: {match: Bash}",
			`policy: default.rateLimits: must be a list, got a mapping`},
		{"same counter twice", "default:\n  rateLimits:\n    - {match: Bash, max: 3, per: 1m}\n    - {match: Bash, max: 5, per: 1m, scope: team, then: deny}",
			`policy: default.rateLimits[1]: counts the same calls as default.rateLimits[0] (the same match, scope and per): make it one rule`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, machine.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	// Every field's problem at once, each named.
	_, err := Parse([]byte("teams:\n  ops:\n    rateLimits: [{match: '', max: -1, per: x, scope: y, then: z}]"))
	require.Error(t, err)
	for _, f := range []string{"match", "max", "per", "scope", "then"} {
		assert.Contains(t, err.Error(), "teams.ops.rateLimits[0]."+f+":")
	}
}

func TestResolve_RateLimitsAddUpNarrowestFirst(t *testing.T) {
	t.Parallel()
	doc, err := Parse([]byte(rateDocument + "conversations:\n  c9:\n    rateLimits: [{match: Write, max: 5, per: 30s, scope: conversation}]\n"))
	require.NoError(t, err)
	r := doc.Resolve("ops", "c9")
	var got []string
	for _, rl := range r.RateLimits {
		got = append(got, rl.String())
	}
	assert.Equal(t, []string{
		`rateLimits[0] "Write" (conversations.c9)`,
		`rateLimits[0] "Bash(rm *)" (teams.ops)`,
		`rateLimits[0] "Bash(rm *)" (default)`,
		`rateLimits[1] "deploy" (default)`,
	}, got)
	def := r.RateLimits[2]
	assert.Equal(t, RateByTeam, def.Scope, "scope defaults to team")
	assert.Equal(t, machine.ActionAsk, def.Then, "then defaults to ask")
	assert.Equal(t, 10*time.Minute, def.Per)
	assert.Equal(t, "10m", def.PerText)
	assert.Regexp(t, `^[0-9a-f]{20}$`, def.ID)

	// The counter's identity survives reordering and a new max or then;
	// a new window is a new counter.
	moved, err := Parse([]byte("default:\n  rateLimits:\n    - {match: Bash, max: 1, per: 1m}\n    - {match: 'Bash(rm *)', max: 9, per: 10m, scope: team, then: deny}"))
	require.NoError(t, err)
	assert.Equal(t, def.ID, moved.Resolve("", "").RateLimits[1].ID)
	other, err := Parse([]byte("default:\n  rateLimits: [{match: 'Bash(rm *)', max: 2, per: 11m}]"))
	require.NoError(t, err)
	assert.NotEqual(t, def.ID, other.Resolve("", "").RateLimits[0].ID)
	assert.NotEqual(t, def.ID, r.RateLimits[1].ID, "the team's rule with the same match is its own counter")

	e, err := NewEngine(doc, nil, nil)
	require.NoError(t, err)
	assert.Len(t, e.RateRules(), 4, "every scope's rules")
}

func TestEvaluate_RateLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rm := func(cmd string) testCall {
		return testCall{tool: "Bash", args: `{"command":"` + cmd + `"}`, team: "dev"}
	}
	now := testClock()
	clock := func() time.Time { return now }
	doc, err := Parse([]byte(rateDocument))
	require.NoError(t, err)
	rates := newMemRates()
	grants := &memGrants{}
	e, err := NewEngine(doc, grants, nil, WithClock(clock), WithRateCounter(rates))
	require.NoError(t, err)
	teamKey := doc.Resolve("dev", "").RateLimits[0].Key(rm("").call())

	// Two slots in the window: two calls run, in any conversation and
	// from any caller of the team.
	for _, conv := range []string{"c1", "c2"} {
		c := rm("rm a.txt")
		c.conv = conv
		v, err := e.Evaluate(ctx, c.call())
		require.NoError(t, err)
		assert.Equal(t, machine.ActionRun, v.Action, v.Reason)
	}
	// A denied call takes no slot, and neither does a dry evaluation.
	v, err := e.Evaluate(ctx, rm("rm -rf /").call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionDeny, v.Action)
	assert.Equal(t, `rules.deny "Bash(rm -rf *)" (default)`, v.Reason)
	v, err = e.EvaluateDry(ctx, rm("rm b.txt").call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionRun, v.Action)
	assert.Equal(t, 2, rates.count(teamKey))

	// The third asks, naming the rule and the count; so does a line with
	// rm anywhere in it, a call a grant covers and one under
	// bypassPermissions: a rate rule is a limit on the swarm, not a question
	// the mode or a grant answers.
	grants.grants = []Grant{{Pattern: "Bash(rm *)", ConversationID: "c1", By: "alice"}}
	bypass := rm("rm c.txt")
	bypass.mode = "bypassPermissions"
	for _, c := range []testCall{rm("rm c.txt"), rm("ls && rm c.txt"), bypass} {
		v, err = e.Evaluate(ctx, c.call())
		require.NoError(t, err)
		assert.Equal(t, machine.ActionAsk, v.Action)
		assert.Equal(t, `rateLimits[0] "Bash(rm *)" (default): 2 of 2 in the last 10m for team dev`, v.Reason)
	}
	// Another team counts apart.
	other := rm("rm c.txt")
	other.team = "qa"
	v, err = e.Evaluate(ctx, other.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionRun, v.Action, v.Reason)

	// The window slides: ten minutes after the first slots, they are free.
	now = now.Add(10 * time.Minute)
	v, err = e.Evaluate(ctx, rm("rm c.txt").call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionRun, v.Action, v.Reason)

	// then: deny, scope: all — one deploy an hour, whoever asks.
	d := testCall{tool: "deploy", args: `{}`, team: "dev"}
	v, err = e.Evaluate(ctx, d.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionRun, v.Action, v.Reason)
	d.team = "qa"
	v, err = e.Evaluate(ctx, d.call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionDeny, v.Action)
	assert.Equal(t, `rateLimits[1] "deploy" (default): 1 of 1 in the last 1h for all calls`, v.Reason)

	// A counter that fails fails the evaluation: the agent retries.
	rates.err = errors.New("bus down")
	_, err = e.Evaluate(ctx, rm("rm x").call())
	require.ErrorContains(t, err, `rateLimits[0] "Bash(rm *)" (default): count team dev: bus down`)
	rates.err = nil

	// Without a counter, nothing is counted and the rule's then holds.
	bare, err := NewEngine(doc, nil, nil)
	require.NoError(t, err)
	v, err = bare.Evaluate(ctx, rm("rm x").call())
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Contains(t, v.Reason, "no rate counter is configured")
}

func TestEvaluate_RateLimitsOfEveryScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	doc, err := Parse([]byte(rateDocument))
	require.NoError(t, err)
	rates := newMemRates()
	e, err := NewEngine(doc, nil, nil, WithClock(testClock), WithRateCounter(rates))
	require.NoError(t, err)
	call := func(caller string) machine.Call {
		c := testCall{tool: "Bash", args: `{"command":"rm a"}`, team: "ops"}.call()
		c.CallerBotID = caller
		return c
	}
	// The team's rule (per caller, 3 a minute, deny) counts first, then
	// the default's (per team, 2 in 10m, ask): the default's is full
	// after two calls, and the team's rule has counted each call so far.
	for range 2 {
		v, err := e.Evaluate(ctx, call("bot-1"))
		require.NoError(t, err)
		assert.Equal(t, machine.ActionRun, v.Action, v.Reason)
	}
	v, err := e.Evaluate(ctx, call("bot-1"))
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Equal(t, `rateLimits[0] "Bash(rm *)" (default): 2 of 2 in the last 10m for team ops`, v.Reason)
	v, err = e.Evaluate(ctx, call("bot-1"))
	require.NoError(t, err)
	assert.Equal(t, machine.ActionDeny, v.Action, "the team's rule comes first once it is full")
	assert.Equal(t, `rateLimits[0] "Bash(rm *)" (teams.ops): 3 of 3 in the last 1m for caller bot-1`, v.Reason)
	r := doc.Resolve("ops", "")
	assert.Equal(t, 3, rates.count(r.RateLimits[0].Key(call("bot-1"))))
	assert.Equal(t, 0, rates.count(r.RateLimits[0].Key(call("bot-2"))), "each caller apart")
	assert.Equal(t, 2, rates.count(r.RateLimits[1].Key(call("bot-2"))), "one count for the team")

	// An ask rule asks as before, after taking its slot of the team's
	// rule (the default's is full, and says so first).
	c := call("bot-2")
	c.Arguments = []byte(`{"command":"rm -i a"}`)
	v, err = e.Evaluate(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, machine.ActionAsk, v.Action)
	assert.Contains(t, v.Reason, `rateLimits[0] "Bash(rm *)" (default)`)
}

func TestMarshal_RateLimitsRoundTrip(t *testing.T) {
	t.Parallel()
	doc, err := Parse([]byte(rateDocument))
	require.NoError(t, err)
	out, err := Marshal(doc)
	require.NoError(t, err)
	again, err := Parse(out)
	require.NoError(t, err)
	assert.Equal(t, doc, again)
	c := doc.Clone()
	c.Default.RateLimits[0].Max = 99
	assert.Equal(t, 2, doc.Default.RateLimits[0].Max, "Clone copies the list")
}

func TestEngine_NamedToolOfARateRule(t *testing.T) {
	t.Parallel()
	doc, err := Parse([]byte("teams:\n  ops:\n    rateLimits: [{match: 'kubectl(delete *)', max: 1, per: 1m}]\n    matchArgument: {kubectl: command}\n"))
	require.NoError(t, err)
	e, err := NewEngine(doc, nil, nil)
	require.NoError(t, err)
	name, ok := e.NamedTool("kubectl")
	assert.True(t, ok, "a tool only a rate rule names is a metric label")
	assert.Equal(t, "kubectl", name)
}

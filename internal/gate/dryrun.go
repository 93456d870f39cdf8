package gate

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// PolicyDryRun replays the calls recorded in a window through a
// candidate policy beside the one in force and says what would change:
// how many calls go from one verdict to another (allow, ask, deny),
// overall, per tool and per team; examples of each change; each team's
// auto-run spend under either policy against its dailyCostLimit. Both
// policies evaluate dry (no grant consulted, no budget counted or
// reserved), each call as its agent submitted it (the original arguments,
// not an approver's edit), in the order the calls were submitted, and
// the flows see each call that completed (from a day before the window
// on) complete in its place among them. Nothing is written: no bucket,
// no event. Viewers and approvers may, as they read every call anyway.
func (s *Service) PolicyDryRun(ctx context.Context, a Actor, r wire.PolicyDryRunRequest) (*wire.PolicyDryRunReply, error) {
	if err := a.require("dry-run a policy", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	until := s.now().UnixMilli()
	examples, err := reportBounds(r.Since, until, r.Examples)
	if err != nil {
		return nil, err
	}
	since := cmp.Or(r.Since, until-wire.DefaultDryRunWindowMs)
	candDoc, err := policy.ParseCandidate([]byte(r.Document))
	if err != nil {
		return nil, fmt.Errorf("candidate %w", err) // "candidate policy: <field>: …"
	}
	fr := &flowReplay{} // flows.go
	candidate, err := policy.NewEngine(candDoc, nil, nil, fr.options(1)...)
	if err != nil {
		return nil, fmt.Errorf("candidate %w", err)
	}
	curDoc, rev, err := s.policies.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("the policy in force: %w", err)
	}
	current, err := policy.NewEngine(curDoc, nil, nil, fr.options(0)...)
	if err != nil {
		return nil, fmt.Errorf("the policy in force: %w", err)
	}
	// Flows replay the calls that completed before the window too, as
	// far back as the longest window: a call of the window may follow one.
	flows := current.HasFlows() || candidate.HasFlows()
	from := since
	if flows {
		from = max(0, since-policy.MaxFlowWithin.Milliseconds())
	}
	entries, err := s.recordedCalls(ctx, from, until)
	if err != nil {
		return nil, err
	}
	d := newDryRun(examples)
	d.reply.Since, d.reply.Until, d.reply.Team, d.reply.PolicyRevision = since, until, r.Team, rev
	for _, st := range replaySteps(entries, since, flows) {
		e := st.e
		// The call as a is shown it: replayed as it is, a candidate's
		// rules could probe a secret a's view masks, a character at a
		// time, by which calls change verdict.
		if !a.seesSecrets(e) {
			e = s.mask(e)
		}
		fr.at = st.at
		if st.completed {
			if err := fr.mark(ctx, e, current, candidate); err != nil {
				return nil, err
			}
			continue
		}
		if r.Team != nil && e.Team != *r.Team {
			continue
		}
		if err := d.replay(ctx, e, current, candidate); err != nil {
			return nil, err
		}
	}
	return d.finish(current, candidate), nil
}

// recordedCalls returns the calls recorded with requestedAt from since to
// until (epoch ms), in no order: the entries of tool_calls and the calls
// retired from it to the archive.
func (s *Service) recordedCalls(ctx context.Context, since, until int64) ([]*machine.Entry, error) {
	all, err := s.calls.ListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("recorded calls: %w", err)
	}
	inWindow := func(e *machine.Entry) bool { return e.RequestedAt >= since && e.RequestedAt <= until }
	if s.archive != nil {
		// A call is archived after it was requested: those archived
		// since the window began hold every retired call of the window.
		archived, err := s.archive.Since(ctx, time.UnixMilli(since))
		if err != nil {
			return nil, fmt.Errorf("recorded calls: %w", err)
		}
		all = mergeArchived(all, archived, inWindow)
	}
	return slices.DeleteFunc(all, func(e *machine.Entry) bool { return !inWindow(e) }), nil
}

// maxExampleDescription bounds an example's description, in runes, so
// that a reply of many examples fits in one NATS message.
const maxExampleDescription = 200

// clip is s cut to n runes, an ellipsis marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// verdicts in the order a reply lists them.
var verdicts = []string{wire.VerdictAllow, wire.VerdictAsk, wire.VerdictDeny}

func verdictOf(a machine.Action) string {
	switch a {
	case machine.ActionRun:
		return wire.VerdictAllow
	case machine.ActionAsk:
		return wire.VerdictAsk
	}
	return wire.VerdictDeny
}

// recordedVerdict is what the policy said of e when it was submitted: a
// call the policy denied is rejected by it; one it asked about has an
// approval deadline; any other ran without asking.
func recordedVerdict(e *machine.Entry) string {
	switch {
	case e.Status == machine.StateRejectedByPolicy:
		return wire.VerdictDeny
	case e.ApprovalTimeoutAt != 0:
		return wire.VerdictAsk
	}
	return wire.VerdictAllow
}

type pair struct{ from, to string }

// tally counts calls per pair of verdicts.
type tally struct {
	calls, changed int
	pairs          map[pair]int
}

func (t *tally) add(p pair, n int) {
	if t.pairs == nil {
		t.pairs = map[pair]int{}
	}
	t.calls += n
	if p.from != p.to {
		t.changed += n
	}
	t.pairs[p] += n
}

// counts lists the pairs counted, changes first, each in verdict order.
func (t *tally) counts() []wire.VerdictCount {
	out := []wire.VerdictCount{}
	for _, changed := range []bool{true, false} {
		for _, from := range verdicts {
			for _, to := range verdicts {
				if n := t.pairs[pair{from, to}]; n > 0 && (from != to) == changed {
					out = append(out, wire.VerdictCount{From: from, To: to, Calls: n})
				}
			}
		}
	}
	return out
}

// spend is a team's auto-run cost under one policy, in all and per UTC day,
// in micro-units, as the budget counts it.
type spend struct {
	total policy.Micros
	days  map[string]policy.Micros
}

func (s *spend) add(day string, cost float64) {
	if s.days == nil {
		s.days = map[string]policy.Micros{}
	}
	s.total = s.total.Plus(policy.MicrosOf(cost))
	s.days[day] = s.days[day].Plus(policy.MicrosOf(cost))
}

// dryRun accumulates a PolicyDryRunReply, one call at a time.
type dryRun struct {
	reply             wire.PolicyDryRunReply
	all               tally
	tools, teams      map[string]*tally
	spent             map[string]*[2]spend // per team: current, candidate
	examples          map[pair][]wire.DryRunExample
	examplesPerPair   int
	recordedCurrent   int
	recordedCandidate int
}

func newDryRun(examples int) *dryRun {
	return &dryRun{tools: map[string]*tally{}, teams: map[string]*tally{}, spent: map[string]*[2]spend{},
		examples: map[pair][]wire.DryRunExample{}, examplesPerPair: examples}
}

// count counts n calls of tool and team whose verdicts are p: overall,
// per tool and per team.
func (d *dryRun) count(p pair, tool, team string, n int) {
	d.all.add(p, n)
	for _, g := range []struct {
		m   map[string]*tally
		key string
	}{{d.tools, tool}, {d.teams, team}} {
		if g.m[g.key] == nil {
			g.m[g.key] = &tally{}
		}
		g.m[g.key].add(p, n)
	}
}

// examplesOf is the examples of each change of verdicts, oldest first, at
// most examplesPerPair of each.
func (d *dryRun) examplesOf(verdicts []wire.VerdictCount) []wire.DryRunExample {
	out := []wire.DryRunExample{}
	for _, c := range verdicts {
		ex := d.examples[pair{c.From, c.To}]
		slices.SortFunc(ex, func(x, y wire.DryRunExample) int {
			return cmp.Or(cmp.Compare(x.RequestedAt, y.RequestedAt), strings.Compare(x.PendingID, y.PendingID))
		})
		out = append(out, ex[:min(len(ex), d.examplesPerPair)]...)
	}
	return out
}

// reportBounds checks a report's since (epoch milliseconds; 0 for its
// default) against until, and its examples a change, which it defaults.
func reportBounds(since, until int64, examples int) (int, error) {
	switch {
	case since < 0:
		return 0, fmt.Errorf("%w: since: epoch milliseconds, got %d", machine.ErrInvalid, since)
	case since > until:
		return 0, fmt.Errorf("%w: since: %s is in the future (now is %s)", machine.ErrInvalid,
			time.UnixMilli(since).UTC().Format(time.RFC3339), time.UnixMilli(until).UTC().Format(time.RFC3339))
	}
	n := cmp.Or(examples, wire.DefaultDryRunExamples)
	if n < 1 || n > wire.MaxDryRunExamples {
		return 0, fmt.Errorf("%w: examples: must be 1 to %d, got %d", machine.ErrInvalid, wire.MaxDryRunExamples, examples)
	}
	return n, nil
}

// replay evaluates e through both policies and counts the verdicts.
func (d *dryRun) replay(ctx context.Context, e *machine.Entry, current, candidate *policy.Engine) error {
	c := e.Call()
	if len(e.OriginalArguments) > 0 {
		c.Arguments = e.OriginalArguments // as the agent submitted it
	}
	was, werr := current.EvaluateDry(ctx, c)
	will, cerr := candidate.EvaluateDry(ctx, c)
	if err := cmp.Or(werr, cerr); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.reply.Skipped == 0 {
			d.reply.SkippedReason = e.PendingID + ": " + err.Error()
		}
		d.reply.Skipped++
		return nil
	}
	p := pair{verdictOf(was.Action), verdictOf(will.Action)}
	d.count(p, e.ToolName, e.Team, 1)
	rec := recordedVerdict(e)
	if rec != p.from {
		d.recordedCurrent++
	}
	if rec != p.to {
		d.recordedCandidate++
	}
	sp := d.spent[e.Team]
	if sp == nil {
		sp = &[2]spend{}
		d.spent[e.Team] = sp
	}
	day := time.UnixMilli(e.RequestedAt).UTC().Format(time.DateOnly)
	for i, v := range []machine.Verdict{was, will} {
		if v.Action == machine.ActionRun {
			sp[i].add(day, e.EstimatedCost)
		}
	}
	if p.from != p.to {
		d.examples[p] = append(d.examples[p], wire.DryRunExample{
			From: p.from, To: p.to, PendingID: e.PendingID, ToolName: e.ToolName, Team: e.Team,
			CallerBotID: e.CallerBotID, RequestedAt: e.RequestedAt, Description: clip(e.Description, maxExampleDescription),
			CurrentReason: was.Reason, CandidateReason: will.Reason,
		})
	}
	return nil
}

// finish sorts what was counted into the reply.
func (d *dryRun) finish(current, candidate *policy.Engine) *wire.PolicyDryRunReply {
	r := &d.reply
	r.Calls, r.Changed, r.Verdicts = d.all.calls, d.all.changed, d.all.counts()
	r.ByTool, r.ByTeam = groups(d.tools), groups(d.teams)
	r.Recorded = wire.DryRunRecorded{Current: d.recordedCurrent, Candidate: d.recordedCandidate}
	r.Examples = d.examplesOf(r.Verdicts)
	r.Budgets = []wire.DryRunBudget{}
	for _, team := range slices.Sorted(maps.Keys(d.spent)) {
		sp := d.spent[team]
		r.Budgets = append(r.Budgets, wire.DryRunBudget{Team: team,
			Current:   spendOf(sp[0], current.Resolve(team, "").DailyCostLimit),
			Candidate: spendOf(sp[1], candidate.Resolve(team, "").DailyCostLimit)})
	}
	return r
}

func spendOf(s spend, limit *float64) wire.DryRunSpend {
	out := wire.DryRunSpend{AutoRunCost: s.total.Float64(), DailyCostLimit: limit, OverLimit: []wire.DryRunDay{}}
	if limit == nil {
		return out
	}
	for _, day := range slices.Sorted(maps.Keys(s.days)) {
		if s.days[day] > policy.MicrosOf(*limit) {
			out.OverLimit = append(out.OverLimit, wire.DryRunDay{Day: day, AutoRunCost: s.days[day].Float64()})
		}
	}
	return out
}

// groups lists tallies by name, the most changes first.
func groups(m map[string]*tally) []wire.DryRunGroup {
	out := make([]wire.DryRunGroup, 0, len(m))
	for name, t := range m {
		out = append(out, wire.DryRunGroup{Name: name, Calls: t.calls, Changed: t.changed, Verdicts: t.counts()})
	}
	slices.SortFunc(out, func(x, y wire.DryRunGroup) int {
		return cmp.Or(cmp.Compare(y.Changed, x.Changed), strings.Compare(x.Name, y.Name))
	})
	return out
}

package analytics

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// The kinds of recommendation.
const (
	// KindAllowRule: humans approved every call of the tool; an allow rule
	// would spare them.
	KindAllowRule = "allow_rule"
	// KindReviewRejections: humans reject most calls of the tool; the
	// agents using it, or the tool, need a look.
	KindReviewRejections = "review_rejections"
	// KindApprovalTimeout: calls of the tool often wait out their deadline;
	// the timeout is too short or the approvers too few.
	KindApprovalTimeout = "approval_timeout"
)

// The thresholds of the recommendations.
const (
	// AllowAfterApprovals: more approvals than this, and nothing but
	// approvals (no rejection, no timeout, no call left overdue), suggests
	// an allow rule. An allow rule runs calls nobody sees, so the
	// evidence must be clean.
	AllowAfterApprovals = 10
	// RejectionsAfterDecisions and RejectionRateAbove: a rejection rate
	// above this over more decisions than that is flagged.
	RejectionsAfterDecisions = 5
	RejectionRateAbove       = 0.5
	// TimeoutsAfterAsked and TimeoutRateAtLeast: a timeout rate of at
	// least this over more asked calls than that is flagged.
	TimeoutsAfterAsked = 5
	TimeoutRateAtLeast = 0.2
)

// recommend derives the recommendations of a report, ordered by tool and
// then kind. waited holds, per tool, the shortest and the longest approval
// timeout its calls that timed out were given (Stats.TimedOutMinMs and
// TimedOutMaxMs).
func recommend(r *wire.AnalyticsReport, waited map[string][2]int64) []wire.Recommendation {
	recs := []wire.Recommendation{}
	for i := range r.Tools {
		t := &r.Tools[i]
		ev := wire.Evidence{
			Asked: t.Asked, Decided: t.Decided, Approved: t.Approved, Rejected: t.Rejected,
			TimedOut: t.TimedOut, Overdue: t.Overdue, ApprovalRate: t.ApprovalRate,
			RejectionRate: t.RejectionRate, TimeoutRate: t.TimeoutRate, TimeToDecide: t.TimeToDecide,
			TopRejectionReasons: t.TopRejectionReasons, LastAskedAt: t.LastAskedAt,
		}
		team, scope := scopeOf(t)
		if t.Approved > AllowAfterApprovals && t.Approved == t.Decided && t.Overdue == 0 {
			doc := &policy.Document{}
			place(doc, team, &policy.Policy{Rules: policy.Rules{Allow: []string{t.Name}}})
			recs = append(recs, wire.Recommendation{
				Kind: KindAllowRule, Tool: t.Name, Scope: scope, Team: team,
				Summary: fmt.Sprintf("%s was approved in all %d of %d decisions (median %s to decide): allow it in %s with the rule %s (every call of the tool, whatever its arguments)",
					t.Name, t.Approved, t.Decided, fmtMs(t.TimeToDecide.P50Ms), scope, t.Name),
				Evidence: ev, Rule: t.Name, Policy: marshalPolicy(doc),
			})
		}
		if t.Decided > RejectionsAfterDecisions && t.RejectionRate > RejectionRateAbove {
			var reasons []string
			for _, r := range t.TopRejectionReasons {
				reasons = append(reasons, fmt.Sprintf("%q (%d)", r.Name, r.Count))
			}
			recs = append(recs, wire.Recommendation{
				Kind: KindReviewRejections, Tool: t.Name, Scope: scope, Team: team,
				Summary: fmt.Sprintf("%s was rejected in %d of %d decisions (%.0f%%); top reasons: %s",
					t.Name, t.Rejected, t.Decided, 100*t.RejectionRate, strings.Join(reasons, ", ")),
				Evidence: ev,
			})
		}
		if t.Asked > TimeoutsAfterAsked && t.TimeoutRate >= TimeoutRateAtLeast {
			// What the calls that timed out waited is the timeout each was
			// given at submit, not what the policy gives now. An aggregate
			// an older version wrote knows only the longest timeout any
			// call was given.
			lo, hi := waited[t.Name][0], waited[t.Name][1]
			if hi == 0 {
				lo, hi = t.ApprovalTimeoutMs, t.ApprovalTimeoutMs
			}
			ev.ApprovalTimeoutMs = hi
			ev.FastestApprovers = fastest(r.Approvers, 3)
			current := time.Duration(hi) * time.Millisecond
			wait := current.String()
			if lo > 0 && lo < hi {
				wait = fmt.Sprintf("%s to %s", time.Duration(lo)*time.Millisecond, current)
			}
			if current <= 0 {
				current = machine.DefaultApprovalTimeout
				wait = "their approval timeout"
			}
			if t.ApprovalTimeoutMs > hi {
				// The policy has changed since: say so, or the advice to
				// raise it would read as advice to lower it.
				wait += fmt.Sprintf(" (calls since have been given up to %s)", time.Duration(t.ApprovalTimeoutMs)*time.Millisecond)
			}
			longer := (2 * current).Round(time.Minute)
			ms := longer.Milliseconds()
			doc := &policy.Document{}
			place(doc, team, &policy.Policy{ApprovalTimeoutMs: &ms})
			who := ""
			if len(ev.FastestApprovers) > 0 {
				who = " such as " + strings.Join(ev.FastestApprovers, ", ")
			}
			recs = append(recs, wire.Recommendation{
				Kind: KindApprovalTimeout, Tool: t.Name, Scope: scope, Team: team,
				Summary: fmt.Sprintf("%s timed out in %d of %d requests (%.0f%%) waiting %s: raise approvalTimeoutMs in %s to %s (it applies to every tool there), or add approvers who answer faster%s",
					t.Name, t.TimedOut+t.Overdue, t.Asked, 100*t.TimeoutRate, wait, scope, longer, who),
				Evidence: ev, Policy: marshalPolicy(doc),
			})
		}
	}
	return recs
}

// scopeOf is where a change for a tool belongs: the team's scope when all
// its calls came from one named team, else the default scope.
func scopeOf(t *wire.ToolReport) (team, scope string) {
	if len(t.Teams) == 1 && t.Teams[0].Name != "" && t.Teams[0].Name != otherKey {
		return t.Teams[0].Name, "teams." + t.Teams[0].Name
	}
	return "", "default"
}

func place(doc *policy.Document, team string, p *policy.Policy) {
	if team == "" {
		doc.Default = p
		return
	}
	doc.Teams = map[string]*policy.Policy{team: p}
}

func marshalPolicy(doc *policy.Document) string {
	b, err := policy.Marshal(doc)
	if err != nil {
		return ""
	}
	return string(b)
}

// fastest names up to n approvers with the quickest median response.
func fastest(approvers []wire.ApproverReport, n int) []string {
	var c []wire.ApproverReport
	for _, a := range approvers {
		if a.Decisions >= 3 {
			c = append(c, a)
		}
	}
	slices.SortFunc(c, func(x, y wire.ApproverReport) int {
		return cmp.Or(cmp.Compare(x.ResponseTime.P50Ms, y.ResponseTime.P50Ms), cmp.Compare(x.Name, y.Name))
	})
	var names []string
	for _, a := range c[:min(n, len(c))] {
		names = append(names, fmt.Sprintf("%s (median %s)", a.Name, fmtMs(a.ResponseTime.P50Ms)))
	}
	return names
}

// fmtMs renders milliseconds as a short duration: 1.2s, 3m4s.
func fmtMs(ms float64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

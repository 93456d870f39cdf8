package analytics

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Bounds on the maps kept in an aggregate, so that a value stays small
// whatever the agents and approvers write.
const (
	maxReasons    = 32  // distinct rejection reasons per aggregate
	maxReasonLen  = 200 // bytes of a reason kept
	maxTeamsKept  = 64  // distinct teams per tool
	maxToolsKept  = 64  // distinct tools per approver
	otherKey      = "(other)"
	noReasonGiven = "(no reason given)"
)

// event is one TOOL_EVENTS message as an aggregate sees it: its head
// (wire.EventHead), all the subscriber decodes of one.
type event struct {
	seq uint64
	*wire.EventHead
}

// aggregate is a value kept under one key of the analytics bucket.
type aggregate interface {
	applied() *consumer.Applied
	add(ev event)
}

// Stats are the aggregates of one tool, or one team: what happened to its
// calls. The counts are of events, each counted once (see Analytics).
type Stats struct {
	Name string `json:"name"`

	Calls        int64 `json:"calls"`        // created: asked + ran without asking + denied by policy
	Asked        int64 `json:"asked"`        // a human was asked
	RanUnasked   int64 `json:"ranUnasked"`   // scheduled by the policy without asking
	PolicyDenied int64 `json:"policyDenied"` // refused by the policy
	Approved     int64 `json:"approved"`
	Rejected     int64 `json:"rejected"` // by a human
	TimedOut     int64 `json:"timedOut"` // rejected because nobody decided in time
	Overdue      int64 `json:"overdue"`  // nobody decided in time, kept pending
	Cancelled    int64 `json:"cancelled"`
	Attempts     int64 `json:"attempts"` // executor claims, reclaims included
	Succeeded    int64 `json:"succeeded"`
	Failed       int64 `json:"failed"`

	// Decide is the time from request to a human's decision.
	Decide Durations `json:"decide"`
	// Reasons counts the reasons humans gave for rejecting.
	Reasons map[string]int64 `json:"reasons,omitempty"`
	// DecidedBy counts the decisions by what made them (machine.Decider:
	// rule, grant, policy, human, quorum, timeout, classifier, channel).
	DecidedBy map[machine.Decider]int64 `json:"decidedBy,omitempty"`
	// Cost and EstimatedCost are sums in micro-units, so that they are
	// exact. An older version kept them as float64 sums, under "cost" and
	// "estimatedCost": see MarshalJSON and UnmarshalJSON.
	Cost          policy.Micros `json:"costMicros"`
	EstimatedCost policy.Micros `json:"estimatedCostMicros"`
	// TimeoutMs is the longest approval timeout a call was given.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// TimedOutMinMs and TimedOutMaxMs are the shortest and the longest
	// approval timeout the calls that timed out (or were left overdue)
	// were given, each by the policy it was submitted under: what they
	// waited, whatever the policy says now.
	TimedOutMinMs int64 `json:"timedOutMinMs,omitempty"`
	TimedOutMaxMs int64 `json:"timedOutMaxMs,omitempty"`
	// Teams counts calls per team (kept for tools: it says which scope a
	// suggested rule belongs in).
	Teams map[string]int64 `json:"teams,omitempty"`
	// LastAskedAt is when a human was last asked, epoch milliseconds.
	LastAskedAt int64 `json:"lastAskedAt,omitempty"`

	Applied consumer.Applied `json:"applied"`
}

func (s *Stats) applied() *consumer.Applied { return &s.Applied }

func (s *Stats) add(ev event) {
	e := ev.Entry
	if slices.Contains(machine.Deciders, ev.DecidedBy) {
		if s.DecidedBy == nil {
			s.DecidedBy = map[machine.Decider]int64{}
		}
		s.DecidedBy[ev.DecidedBy]++
	}
	switch ev.Event {
	case machine.EventAsk, machine.EventSchedule, machine.EventDeny:
		s.Calls++
		s.EstimatedCost = s.EstimatedCost.Plus(policy.MicrosOf(e.EstimatedCost))
		switch ev.Event {
		case machine.EventAsk:
			s.Asked++
			s.LastAskedAt = max(s.LastAskedAt, ev.At)
			if e.ApprovalTimeoutAt > 0 {
				s.TimeoutMs = max(s.TimeoutMs, e.ApprovalTimeoutAt-e.RequestedAt)
			}
		case machine.EventSchedule:
			s.RanUnasked++
		case machine.EventDeny:
			s.PolicyDenied++
		}
	case machine.EventApprove:
		s.Approved++
		s.Decide.Add(e.DecisionTime - e.RequestedAt)
	case machine.EventReject:
		s.Rejected++
		s.Decide.Add(e.DecisionTime - e.RequestedAt)
		s.Reasons = countBounded(s.Reasons, reasonKey(ev.Reason), maxReasons)
	case machine.EventTimeout:
		s.TimedOut++
		s.timedOutAfter(e)
	case machine.EventOverdue:
		s.Overdue++
		s.timedOutAfter(e)
	case machine.EventCancel:
		s.Cancelled++
	case machine.EventStart, machine.EventReclaim:
		s.Attempts++
	case machine.EventSucceed:
		s.Succeeded++
		s.Cost = s.Cost.Plus(policy.MicrosOf(e.Cost))
	case machine.EventFail:
		s.Failed++
		s.Cost = s.Cost.Plus(policy.MicrosOf(e.Cost))
	}
}

// legacyCosts are Stats' sums of cost as an older version kept them,
// float64 sums under "cost" and "estimatedCost".
type legacyCosts struct {
	Cost          float64 `json:"cost"`
	EstimatedCost float64 `json:"estimatedCost"`
}

// MarshalJSON writes s with its sums of cost in micro-units and, for the
// processes of an older version while an upgrade rolls out, as the
// float64 sums they read.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats
	return json.Marshal(struct {
		plain
		legacyCosts
	}{plain(s), legacyCosts{s.Cost.Float64(), s.EstimatedCost.Float64()}})
}

// UnmarshalJSON reads a value of either version. One an older version
// wrote (or wrote back, keeping only the keys it knows) has its sums of
// cost as float64 only: they are read rounded to the millionth, so
// nothing it counted is lost.
func (s *Stats) UnmarshalJSON(data []byte) error {
	type plain Stats
	v := struct {
		*plain
		legacyCosts
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if s.Cost == 0 && v.legacyCosts.Cost != 0 {
		s.Cost = policy.MicrosOf(v.legacyCosts.Cost)
	}
	if s.EstimatedCost == 0 && v.legacyCosts.EstimatedCost != 0 {
		s.EstimatedCost = policy.MicrosOf(v.legacyCosts.EstimatedCost)
	}
	return nil
}

// timedOutAfter counts the approval timeout of e, a call that timed out:
// the time from its request to its deadline, both set at submit.
func (s *Stats) timedOutAfter(e *wire.EntryHead) {
	if e.ApprovalTimeoutAt <= e.RequestedAt {
		return
	}
	s.addTimedOutRange(e.ApprovalTimeoutAt-e.RequestedAt, e.ApprovalTimeoutAt-e.RequestedAt)
}

// addTimedOutRange widens the range of timed-out calls' timeouts to take
// in lo..hi (0: none).
func (s *Stats) addTimedOutRange(lo, hi int64) {
	if lo <= 0 {
		return
	}
	if s.TimedOutMinMs == 0 || lo < s.TimedOutMinMs {
		s.TimedOutMinMs = lo
	}
	s.TimedOutMaxMs = max(s.TimedOutMaxMs, hi)
}

// toolStats are a tool's Stats, which also count calls per team.
type toolStats struct{ Stats }

func (s *toolStats) add(ev event) {
	s.Stats.add(ev)
	switch ev.Event {
	case machine.EventAsk, machine.EventSchedule, machine.EventDeny:
		s.Teams = countBounded(s.Teams, ev.Entry.Team, maxTeamsKept)
	}
}

// merge adds o to s (for totals).
func (s *Stats) merge(o *Stats) {
	s.Calls += o.Calls
	s.Asked += o.Asked
	s.RanUnasked += o.RanUnasked
	s.PolicyDenied += o.PolicyDenied
	s.Approved += o.Approved
	s.Rejected += o.Rejected
	s.TimedOut += o.TimedOut
	s.Overdue += o.Overdue
	s.Cancelled += o.Cancelled
	s.Attempts += o.Attempts
	s.Succeeded += o.Succeeded
	s.Failed += o.Failed
	s.Decide.Merge(o.Decide)
	for r, n := range o.Reasons {
		if s.Reasons == nil {
			s.Reasons = map[string]int64{}
		}
		s.Reasons[r] += n
	}
	for d, n := range o.DecidedBy {
		if s.DecidedBy == nil {
			s.DecidedBy = map[machine.Decider]int64{}
		}
		s.DecidedBy[d] += n
	}
	s.Cost = s.Cost.Plus(o.Cost)
	s.EstimatedCost = s.EstimatedCost.Plus(o.EstimatedCost)
	s.TimeoutMs = max(s.TimeoutMs, o.TimeoutMs)
	s.addTimedOutRange(o.TimedOutMinMs, o.TimedOutMaxMs)
	s.LastAskedAt = max(s.LastAskedAt, o.LastAskedAt)
}

// ApproverStats are one approver's decisions.
type ApproverStats struct {
	Name     string    `json:"name"`
	Approved int64     `json:"approved"`
	Rejected int64     `json:"rejected"`
	Response Durations `json:"response"` // request to this approver's decision
	// RejectedTools counts this approver's rejections per tool.
	RejectedTools map[string]int64 `json:"rejectedTools,omitempty"`

	// An automated reviewer's (reviewer:<name>) reviews that left a call
	// to humans, and how humans then decided it (reviewers.go).
	Reviews ReviewerStats `json:"reviews,omitzero"`

	Applied consumer.Applied `json:"applied"`
}

func (a *ApproverStats) applied() *consumer.Applied { return &a.Applied }

func (a *ApproverStats) add(ev event) {
	e := ev.Entry
	if a.Reviews.add(a.Name, ev) {
		return
	}
	switch ev.Event {
	case machine.EventApprove:
		a.Approved++
	case machine.EventReject:
		a.Rejected++
		a.RejectedTools = countBounded(a.RejectedTools, e.ToolName, maxToolsKept)
	case machine.EventVote:
		// An approver's say on a call under a quorum that did not settle
		// it: theirs all the same.
		if len(e.Votes) == 0 {
			return
		}
		v := e.Votes[len(e.Votes)-1]
		if v.Approve {
			a.Approved++
		} else {
			a.Rejected++
			a.RejectedTools = countBounded(a.RejectedTools, e.ToolName, maxToolsKept)
		}
		a.Response.Add(v.At - e.RequestedAt)
		return
	default:
		return
	}
	a.Response.Add(e.DecisionTime - e.RequestedAt)
}

// HourStats are one hour's activity (by the time of each event, UTC), and
// each of its minutes', for charts.
type HourStats struct {
	Hour     int64            `json:"hour"` // start, epoch milliseconds
	Point                     // the whole hour
	Response Durations        `json:"response"`
	Minutes  map[int]*Point   `json:"minutes,omitempty"` // 0..59
	Applied  consumer.Applied `json:"applied"`
}

// Point is the activity of one interval.
type Point struct {
	Calls         int64 `json:"calls"`
	Asked         int64 `json:"asked"`
	Approved      int64 `json:"approved"`
	Rejected      int64 `json:"rejected"`
	TimedOut      int64 `json:"timedOut"`
	ResponseSumMs int64 `json:"responseSumMs"` // of the approved and rejected
}

func (p *Point) add(ev event) {
	e := ev.Entry
	switch ev.Event {
	case machine.EventAsk:
		p.Calls++
		p.Asked++
	case machine.EventSchedule, machine.EventDeny:
		p.Calls++
	case machine.EventApprove:
		p.Approved++
		p.ResponseSumMs += max(e.DecisionTime-e.RequestedAt, 0)
	case machine.EventReject:
		p.Rejected++
		p.ResponseSumMs += max(e.DecisionTime-e.RequestedAt, 0)
	case machine.EventTimeout, machine.EventOverdue:
		p.TimedOut++
	}
}

func (h *HourStats) applied() *consumer.Applied { return &h.Applied }

func (h *HourStats) add(ev event) {
	h.Point.add(ev)
	minute := time.UnixMilli(ev.At).UTC().Minute()
	if h.Minutes == nil {
		h.Minutes = map[int]*Point{}
	}
	if h.Minutes[minute] == nil {
		h.Minutes[minute] = &Point{}
	}
	h.Minutes[minute].add(ev)
	switch ev.Event {
	case machine.EventApprove, machine.EventReject:
		h.Response.Add(ev.Entry.DecisionTime - ev.Entry.RequestedAt)
	}
}

func reasonKey(r string) string {
	r = strings.TrimSpace(r)
	if r == "" {
		return noReasonGiven
	}
	if len(r) > maxReasonLen {
		r = strings.ToValidUTF8(r[:maxReasonLen], "") + "…"
	}
	return r
}

// countBounded adds one to m[k], unless m already holds limit keys and k is
// not one of them: then it counts under otherKey.
func countBounded(m map[string]int64, k string, limit int) map[string]int64 {
	if m == nil {
		m = map[string]int64{}
	}
	if _, ok := m[k]; !ok && len(m) >= limit {
		k = otherKey
	}
	m[k]++
	return m
}

// top returns the n largest counts of m, ties by name.
func top(m map[string]int64, n int) []wire.NameCount {
	if len(m) == 0 {
		return nil
	}
	out := make([]wire.NameCount, 0, len(m))
	for k, v := range m {
		out = append(out, wire.NameCount{Name: k, Count: v})
	}
	slices.SortFunc(out, func(a, b wire.NameCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

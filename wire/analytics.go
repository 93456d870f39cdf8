package wire

import "github.com/toolgate/toolgate/machine"

// The analytics report (EndpointAnalytics, GET /v1/analytics, `toolgate
// stats`): what the analytics subscriber counted of the calls, per tool,
// team and approver, its recommendations and a series for charts.

// AnalyticsReport is what the analytics say: GET /v1/analytics and `toolgate stats`
// show it.
type AnalyticsReport struct {
	GeneratedAt int64  `json:"generatedAt"` // epoch milliseconds
	Generation  uint64 `json:"generation"`
	// Lag is how many events are not yet counted: when it is not 0, the
	// numbers are catching up.
	Lag             uint64           `json:"lag"`
	Totals          ToolReport       `json:"totals"`
	Tools           []ToolReport     `json:"tools"`
	Teams           []ToolReport     `json:"teams"`
	Approvers       []ApproverReport `json:"approvers"`
	Recommendations []Recommendation `json:"recommendations"`
	Series          AnalyticsSeries  `json:"series"`
}

// ToolReport is what happened to the calls of a tool, or of a team.
type ToolReport struct {
	Name         string `json:"name"`
	Calls        int64  `json:"calls"`
	Asked        int64  `json:"asked"`
	RanUnasked   int64  `json:"ranUnasked"`
	PolicyDenied int64  `json:"policyDenied"`
	Approved     int64  `json:"approved"`
	Rejected     int64  `json:"rejected"`
	TimedOut     int64  `json:"timedOut"`
	Overdue      int64  `json:"overdue"`
	Cancelled    int64  `json:"cancelled"`
	Attempts     int64  `json:"attempts"`
	Succeeded    int64  `json:"succeeded"`
	Failed       int64  `json:"failed"`
	// Decided are the asked calls that got an answer: approved, rejected,
	// or rejected by the timeout.
	Decided       int64   `json:"decided"`
	ApprovalRate  float64 `json:"approvalRate"`  // approved / decided
	RejectionRate float64 `json:"rejectionRate"` // rejected (by a human) / decided
	TimeoutRate   float64 `json:"timeoutRate"`   // (timed out + overdue) / asked
	// TimeToDecide is request to a human's decision.
	TimeToDecide        DurationSummary `json:"timeToDecide"`
	TopRejectionReasons []NameCount     `json:"topRejectionReasons,omitempty"`
	// DecidedBy counts the decisions by what made them: the policy's
	// rules, grants and other settings at submit, humans, quorums,
	// timeouts, agents' classifiers and channels.
	DecidedBy         map[machine.Decider]int64 `json:"decidedBy,omitempty"`
	Cost              float64                   `json:"cost"`
	EstimatedCost     float64                   `json:"estimatedCost"`
	ApprovalTimeoutMs int64                     `json:"approvalTimeoutMs,omitempty"` // the longest a call was given
	Teams             []NameCount               `json:"teams,omitempty"`             // a tool's calls per team
	LastAskedAt       int64                     `json:"lastAskedAt,omitempty"`
}

// ApproverReport is one approver's decisions.
type ApproverReport struct {
	Name              string          `json:"name"`
	Decisions         int64           `json:"decisions"`
	Approved          int64           `json:"approved"`
	Rejected          int64           `json:"rejected"`
	ApprovalRate      float64         `json:"approvalRate"`
	ResponseTime      DurationSummary `json:"responseTime"`
	MostRejectedTools []NameCount     `json:"mostRejectedTools,omitempty"`
	// Reviews, of an automated reviewer (reviewer:<name>): the calls it
	// left to humans, and how often they overruled it.
	Reviews *ReviewerReport `json:"reviews,omitempty"`
}

// AnalyticsSeries is activity over time, for charts.
type AnalyticsSeries struct {
	Resolution string        `json:"resolution"` // "hour" or "minute"
	From       int64         `json:"from"`       // epoch milliseconds, inclusive
	To         int64         `json:"to"`         // exclusive
	Points     []SeriesPoint `json:"points"`     // one per interval, oldest first, empty ones included
}

// SeriesPoint is one interval's activity. Decisions are by the time they
// were made; their response time is from the call's request.
type SeriesPoint struct {
	T              int64   `json:"t"` // start, epoch milliseconds
	Calls          int64   `json:"calls"`
	Asked          int64   `json:"asked"`
	Decisions      int64   `json:"decisions"`
	Approved       int64   `json:"approved"`
	Rejected       int64   `json:"rejected"`
	TimedOut       int64   `json:"timedOut"`
	MeanResponseMs float64 `json:"meanResponseMs"`
	P50ResponseMs  float64 `json:"p50ResponseMs,omitempty"` // hourly points only
	P90ResponseMs  float64 `json:"p90ResponseMs,omitempty"`
}

// NameCount is a name and how often it came up.
type NameCount struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

// DurationSummary is what a report says of a Durations.
type DurationSummary struct {
	Count  int64   `json:"count"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
}

// ReviewerReport is ReviewerStats as the report shows them.
type ReviewerReport struct {
	Escalated int64 `json:"escalated"`
	Refused   int64 `json:"refused"`
	// Overruled counts the calls it left to humans, leaning one way,
	// that a human decided the other way; Upheld, the same way.
	Overruled int64 `json:"overruled"`
	Upheld    int64 `json:"upheld"`
}

// Recommendation is a suggested policy change with the evidence for it.
type Recommendation struct {
	Kind string `json:"kind"`
	Tool string `json:"tool"`
	// Scope is where the suggested change goes: "default", or
	// "teams.<team>" when every call of the tool came from one team (Team).
	Scope string `json:"scope"`
	Team  string `json:"team,omitempty"`
	// Summary says in a sentence what was seen and what to do.
	Summary  string   `json:"summary"`
	Evidence Evidence `json:"evidence"`
	// Rule is the allow rule to add (KindAllowRule), in rule syntax.
	Rule string `json:"rule,omitempty"`
	// Policy is a policy document (YAML) holding just the change, to merge
	// into the one in force. Policy rules add up across scopes, so for an
	// allow rule merging means appending Rule to the scope's rules.allow.
	Policy string `json:"policy,omitempty"`
}

// Evidence are the numbers a recommendation rests on.
type Evidence struct {
	Asked               int64           `json:"asked"`
	Decided             int64           `json:"decided"`
	Approved            int64           `json:"approved"`
	Rejected            int64           `json:"rejected"`
	TimedOut            int64           `json:"timedOut"`
	Overdue             int64           `json:"overdue"`
	ApprovalRate        float64         `json:"approvalRate"`
	RejectionRate       float64         `json:"rejectionRate"`
	TimeoutRate         float64         `json:"timeoutRate"`
	TimeToDecide        DurationSummary `json:"timeToDecide"`
	TopRejectionReasons []NameCount     `json:"topRejectionReasons,omitempty"`
	// ApprovalTimeoutMs is the approval timeout the calls that timed out
	// were given when they were submitted (the longest, if it changed).
	ApprovalTimeoutMs int64 `json:"approvalTimeoutMs,omitempty"`
	// FastestApprovers are the approvers with the quickest median response
	// (of those with at least 3 decisions), for a tool that times out.
	FastestApprovers []string `json:"fastestApprovers,omitempty"`
	LastAskedAt      int64    `json:"lastAskedAt,omitempty"`
}

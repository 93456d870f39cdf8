package wire

// EndpointPolicyDryRun replays the recorded calls of a window through a
// candidate policy beside the one in force (PolicyDryRunRequest).
const EndpointPolicyDryRun = "policy_dry_run"

// The verdicts a dry run compares: what a policy says of a call when it
// is submitted. Allow is the policy's "run" (at once or after a delay).
const (
	VerdictAllow = "allow"
	VerdictAsk   = "ask"
	VerdictDeny  = "deny"
)

// Bounds of a dry run's request.
const (
	// DefaultDryRunWindowMs is the window of a request that names no
	// Since: the last 7 days.
	DefaultDryRunWindowMs = 7 * 24 * 60 * 60 * 1000
	// DefaultDryRunExamples is how many example calls of each change of
	// verdict a reply holds when the request does not say.
	DefaultDryRunExamples = 5
	// MaxDryRunExamples bounds Examples.
	MaxDryRunExamples = 50
)

// PolicyDryRunRequest asks what a candidate policy would change: the
// calls recorded from Since on are evaluated through the policy in force
// and through Document, both dry (no grant consulted, no budget counted
// or reserved), and nothing is written.
type PolicyDryRunRequest struct {
	// Document is the candidate, YAML or JSON, as `policy set` takes it.
	// Its secrets may be left "[redacted]", as `policy get` shows them:
	// none decides a verdict.
	Document string `json:"document" max:"1048576"`
	// Since starts the window, in epoch milliseconds: the calls requested
	// from then to now are replayed. 0: DefaultDryRunWindowMs before now.
	Since int64 `json:"since,omitempty"`
	// Team narrows the replay to one team's calls ("" is the team of
	// calls that name none); absent, every team's.
	Team *string `json:"team,omitempty"`
	// Examples is how many example calls of each change of verdict to
	// show (default DefaultDryRunExamples, at most MaxDryRunExamples).
	Examples int `json:"examples,omitempty"`
}

// PolicyDryRunReply is what a candidate policy would change over the
// window's calls.
type PolicyDryRunReply struct {
	// Since and Until bound the window replayed (epoch ms, Until is when
	// the dry run ran).
	Since int64   `json:"since"`
	Until int64   `json:"until"`
	Team  *string `json:"team,omitempty"`
	// PolicyRevision is the revision of the policy in force the candidate
	// was compared with (0: none stored, the built-in defaults).
	PolicyRevision uint64 `json:"policyRevision"`
	// Calls is how many recorded calls were replayed; Changed, how many
	// of them the candidate gives another verdict than the policy in
	// force.
	Calls   int `json:"calls"`
	Changed int `json:"changed"`
	// Verdicts counts the calls per pair of verdicts, the policy in
	// force's (From) and the candidate's (To), unchanged pairs included,
	// changes first.
	Verdicts []VerdictCount `json:"verdicts"`
	// ByTool and ByTeam are the same counts per tool and per team, the
	// groups with the most changes first.
	ByTool []DryRunGroup `json:"byTool"`
	ByTeam []DryRunGroup `json:"byTeam"`
	// Examples are up to the request's Examples calls of each change of
	// verdict, oldest first.
	Examples []DryRunExample `json:"examples"`
	// Budgets are, per team, the estimated cost of the calls each policy
	// would run without asking, and the days that spend would pass the
	// team's dailyCostLimit.
	Budgets []DryRunBudget `json:"budgets"`
	// Recorded counts the calls whose verdict differs from the one
	// recorded when they were submitted, under each policy: a call a
	// grant ran, one the budget sent to a human, or one submitted under
	// an older policy differs under the policy in force too.
	Recorded DryRunRecorded `json:"recorded"`
	// Skipped counts the calls neither policy could evaluate (arguments
	// that are not a JSON object, say), which are left out of every count
	// above; SkippedReason is the first one's error.
	Skipped       int    `json:"skipped,omitempty"`
	SkippedReason string `json:"skippedReason,omitempty"`
}

// VerdictCount is how many calls the policy in force gives From and the
// candidate To (allow, ask or deny).
type VerdictCount struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Calls int    `json:"calls"`
}

// DryRunGroup is a dry run's counts for one tool or one team ("": calls
// that name no team).
type DryRunGroup struct {
	Name     string         `json:"name"`
	Calls    int            `json:"calls"`
	Changed  int            `json:"changed"`
	Verdicts []VerdictCount `json:"verdicts"`
}

// DryRunExample is one call whose verdict the candidate changes, with
// the reason each policy gives (the rule or field that decided) and the
// call's recorded description (its secrets masked, as every entry's; cut
// to 200 characters).
type DryRunExample struct {
	From            string `json:"from"`
	To              string `json:"to"`
	PendingID       string `json:"pendingId"`
	ToolName        string `json:"toolName"`
	Team            string `json:"team,omitempty"`
	CallerBotID     string `json:"callerBotId"`
	RequestedAt     int64  `json:"requestedAt"`
	Description     string `json:"description,omitempty"`
	CurrentReason   string `json:"currentReason"`
	CandidateReason string `json:"candidateReason"`
}

// DryRunBudget is one team's spend under the policy in force and under
// the candidate.
type DryRunBudget struct {
	Team      string      `json:"team"`
	Current   DryRunSpend `json:"current"`
	Candidate DryRunSpend `json:"candidate"`
}

// DryRunSpend is the estimated cost of the calls a policy runs without
// asking (the sum of their estimatedCost), the team's dailyCostLimit under
// that policy (none: nil), and the UTC days on which that cost passes it.
// A dry run counts no budget: a call past the limit counts as allowed, where
// a real evaluation would have asked about it.
type DryRunSpend struct {
	AutoRunCost    float64     `json:"autoRunCost"`
	DailyCostLimit *float64    `json:"dailyCostLimit,omitempty"`
	OverLimit      []DryRunDay `json:"overLimit"`
}

// DryRunDay is a team's auto-run cost on one UTC day (YYYY-MM-DD).
type DryRunDay struct {
	Day         string  `json:"day"`
	AutoRunCost float64 `json:"autoRunCost"`
}

// DryRunRecorded counts the calls whose verdict under each policy differs
// from the one recorded.
type DryRunRecorded struct {
	Current   int `json:"current"`
	Candidate int `json:"candidate"`
}

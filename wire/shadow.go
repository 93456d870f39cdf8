package wire

// The request API's endpoints of the shadow policy: a candidate policy
// stored beside the one in force, which every submit is also evaluated
// against, enforcing nothing.
const (
	// EndpointPolicyShadowGet reads the shadow policy (PolicyGetRequest;
	// reply PolicyDocument).
	EndpointPolicyShadowGet = "policy_shadow_get"
	// EndpointPolicyShadowSet stores a shadow policy (PolicyDocument; reply
	// PolicyDocument). Admins only.
	EndpointPolicyShadowSet = "policy_shadow_set"
	// EndpointPolicyShadowClear drops the shadow policy (no body; reply
	// PolicyShadowCleared). Admins only.
	EndpointPolicyShadowClear = "policy_shadow_clear"
	// EndpointPolicyShadowPromote puts the shadow policy in force and drops
	// it (PolicyShadowPromoteRequest; reply PolicyDocument, the policy in
	// force). Admins only.
	EndpointPolicyShadowPromote = "policy_shadow_promote"
	// EndpointPolicyShadowReport says what the shadow policy would have
	// changed of the calls submitted (PolicyShadowReportRequest; reply
	// PolicyShadowReport).
	EndpointPolicyShadowReport = "policy_shadow_report"
)

// ShadowStream keeps what the processes that serve submits compared
// against the shadow policy: one ShadowTally per process and moment.
const ShadowStream = "TOOL_SHADOW"

// ShadowSubject is where a process records a ShadowTally.
const ShadowSubject = internalPrefix + "shadow.tally"

// Bounds of the shadow policy's records.
const (
	// ShadowMaxAgeMs is how long TOOL_SHADOW keeps a tally: 7 days.
	ShadowMaxAgeMs = 7 * 24 * 60 * 60 * 1000
	// ShadowMaxTallies bounds TOOL_SHADOW; past it the oldest tallies go.
	// (A bound in bytes would reserve that much of the JetStream store.)
	ShadowMaxTallies = 50_000
	// ShadowExamplesPerMinute bounds the examples a process keeps: every
	// difference is counted, and up to this many of each change of
	// verdict per process and minute are kept with their call.
	ShadowExamplesPerMinute = 5
)

// PolicyShadowPromoteRequest asks to put the shadow policy stored at
// Revision in force. A shadow changed since (another revision) is not
// promoted.
type PolicyShadowPromoteRequest struct {
	Revision uint64 `json:"revision"`
}

// PolicyShadowCleared says which shadow policy a clear dropped (Revision
// 0: none was set).
type PolicyShadowCleared struct {
	Revision uint64 `json:"revision"`
}

// PolicyShadowReportRequest asks what a shadow policy would have changed
// of the calls submitted from Since on.
type PolicyShadowReportRequest struct {
	// Since starts the window, in epoch milliseconds; 0: all that
	// TOOL_SHADOW keeps (ShadowMaxAgeMs).
	Since int64 `json:"since,omitempty"`
	// Revision is the shadow policy's revision to report on; 0: the one
	// set now, or with none set, the last one recorded.
	Revision uint64 `json:"revision,omitempty"`
	// Examples is how many example calls of each change of verdict to
	// show (default DefaultDryRunExamples, at most MaxDryRunExamples).
	Examples int `json:"examples,omitempty"`
}

// PolicyShadowReport is what a shadow policy would have changed of the
// calls submitted while it was set, in a dry run's terms: each call is
// evaluated when it is submitted through the policy in force and through
// the shadow, both dry (no grant consulted, no budget counted, no rate
// slot taken), so the counts are what `policy dry-run` of the shadow's
// document says of the same calls.
type PolicyShadowReport struct {
	// Since and Until bound the window (epoch ms; Until is now).
	Since int64 `json:"since"`
	Until int64 `json:"until"`
	// ShadowRevision is the shadow policy reported on (0: none was ever
	// recorded); Set says whether it is the shadow set now.
	ShadowRevision uint64 `json:"shadowRevision"`
	Set            bool   `json:"set"`
	// Calls is how many submits were compared; Changed, how many of them
	// the shadow gives another verdict than the policy in force.
	Calls   int `json:"calls"`
	Changed int `json:"changed"`
	// Verdicts, ByTool, ByTeam and Examples are as a dry run's
	// (PolicyDryRunReply).
	Verdicts []VerdictCount  `json:"verdicts"`
	ByTool   []DryRunGroup   `json:"byTool"`
	ByTeam   []DryRunGroup   `json:"byTeam"`
	Examples []DryRunExample `json:"examples"`
	// Skipped counts the submits either policy could not evaluate, left
	// out of every count above.
	Skipped int `json:"skipped,omitempty"`
}

// ShadowTally is what one process compared against one shadow policy over
// a moment, as TOOL_SHADOW keeps it.
type ShadowTally struct {
	ShadowRevision uint64 `json:"shadowRevision"`
	// At is when the process recorded it (epoch ms).
	At       int64           `json:"at"`
	Counts   []ShadowCount   `json:"counts"`
	Examples []DryRunExample `json:"examples,omitempty"`
	Skipped  int             `json:"skipped,omitempty"`
}

// ShadowCount is how many submits of one tool and team the policy in
// force gave From and the shadow To.
type ShadowCount struct {
	Tool  string `json:"tool"`
	Team  string `json:"team,omitempty"`
	From  string `json:"from"`
	To    string `json:"to"`
	Calls int    `json:"calls"`
}

package wire

// EndpointRecheck evaluates a call again through the policy in force,
// as whoever is about to run it asks before it does (RecheckRequest).
const EndpointRecheck = "recheck"

// RecheckRequest names the call to evaluate again: its arguments as they
// stand (an approver's edit, if there was one), its team, conversation and
// permission mode. Nothing is written.
type RecheckRequest struct {
	PendingID string `json:"pendingId"`
}

// RecheckReply says whether the policy in force now denies the call.
type RecheckReply struct {
	// PolicyRevision is the revision of the policy that evaluated it (0:
	// none stored, the built-in defaults).
	PolicyRevision uint64 `json:"policyRevision"`
	// Denied names the rule or field that denies the call now, as a
	// REJECTED_BY_POLICY entry's statusReason would; "" when the policy
	// in force does not deny it (it runs it, or asks, and a human has
	// answered).
	Denied string `json:"denied,omitempty"`
}

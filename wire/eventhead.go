package wire

import "github.com/toolgate/toolgate/machine"

// EventHead is what toolgate's own readers of the events read of one
// (the metrics exporter, the analytics, the notifier's fan-out, the
// budget settler), and all they decode: the rest of its entry
// (arguments, result, description) and its receipt were most of the cost
// of decoding one. Each field has the name and JSON key of Event's,
// machine.Entry's or machine.Vote's, so that it decodes the same value
// (TestEventHead_DecodesAsTheEvent).
type EventHead struct {
	ID     string        `json:"id"`
	Event  machine.Event `json:"event"`
	From   machine.State `json:"from"`
	To     machine.State `json:"to"`
	Actor  string        `json:"actor"`
	Reason string        `json:"reason"`
	// DecidedBy is what decided, on an event of a decision.
	DecidedBy machine.Decider `json:"decidedBy"`
	At        int64           `json:"at"`
	Entry     *EntryHead      `json:"entry"`
}

// EntryHead is what EventHead holds of the event's entry.
type EntryHead struct {
	ToolName                   string     `json:"toolName"`
	Team                       string     `json:"team"`
	ConversationID             string     `json:"conversationId"`
	RequestedAt                int64      `json:"requestedAt"`
	ApprovalTimeoutAt          int64      `json:"approvalTimeoutAt"`
	ApprovedOrRejectedByUserID string     `json:"approvedOrRejectedByUserId"`
	DecisionTime               int64      `json:"decisionTime"`
	OutcomeUnknown             bool       `json:"outcomeUnknown"`
	LastAttemptTime            int64      `json:"lastAttemptTime"`
	Cost                       float64    `json:"cost"`
	EstimatedCost              float64    `json:"estimatedCost"`
	CostReserved               float64    `json:"costReserved"`
	CostDay                    string     `json:"costDay"`
	Votes                      []VoteHead `json:"votes"`
	// Reviews are what automated reviewers said that left the call to
	// humans (machine.Review).
	Reviews []ReviewHead `json:"reviews"`
}

// ReviewHead is what EntryHead holds of a machine.Review.
type ReviewHead struct {
	By     string `json:"by"`
	Answer string `json:"answer"`
	Lean   string `json:"lean"`
}

// VoteHead is what EntryHead holds of a machine.Vote.
type VoteHead struct {
	Approve bool  `json:"approve"`
	At      int64 `json:"at"`
}

// DecodeEventHead decodes data, an Event, into its head.
func DecodeEventHead(data []byte) (*EventHead, error) {
	h := new(EventHead)
	if err := Unmarshal(data, h); err != nil {
		return nil, err
	}
	return h, nil
}

package wire

import (
	"fmt"
	"unicode/utf8"

	"github.com/toolgate/toolgate/machine"
)

// An automated reviewer (the policy's reviewers:) is sent a ReviewRequest
// for each asked call its match covers, as a signed HTTP POST (the
// headers a webhook delivery carries: webhook-id, webhook-timestamp,
// webhook-signature) or a NATS request, and answers a ReviewAnswer, as
// JSON, within its timeoutMs.

// ReviewVersion is the version of ReviewRequest, its v.
const ReviewVersion = 1

// MaxReviewRecent bounds ReviewRequest.Recent.
const MaxReviewRecent = 20

// MaxReviewAnswer bounds the body of a reviewer's answer, in bytes.
const MaxReviewAnswer = 8 << 10

// MaxReviewReason bounds ReviewAnswer.Reason, in bytes.
const MaxReviewReason = 1024

// ReviewRequest is what a reviewer is sent: the call masked as an
// approver sees it, and the conversation's latest other calls (at most
// MaxReviewRecent, newest first), masked too.
type ReviewRequest struct {
	V        int    `json:"v"`
	Reviewer string `json:"reviewer"`
	// Call is the asked call, its secrets masked.
	Call *machine.Entry `json:"call"`
	// Recent are the conversation's latest other calls, newest first.
	Recent []*machine.Entry `json:"recent"`
	// Deadline is when the answer must have arrived (epoch ms); a later
	// one is not waited for.
	Deadline int64 `json:"deadline"`
}

// ReviewAnswer is a reviewer's answer: Decision one of approve, reject,
// escalate (leave it to humans, saying so: recorded on the call) or
// abstain (no opinion: left to humans, nothing recorded); Reason why,
// which the call records (at most MaxReviewReason bytes). An escalation
// may say which way the reviewer leans (approve or reject), so that a
// human who decides otherwise is counted as overruling it.
type ReviewAnswer struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty" max:"1024"`
	Lean     string `json:"lean,omitempty"`
}

// Check says what is wrong with a, naming the field.
func (a ReviewAnswer) Check() error {
	switch a.Decision {
	case machine.ReviewApprove, machine.ReviewReject, machine.ReviewEscalate, machine.ReviewAbstain:
	default:
		return fmt.Errorf("%w: decision: want approve, reject, escalate or abstain, got %.64q", machine.ErrInvalid, a.Decision)
	}
	switch {
	case len(a.Reason) > MaxReviewReason:
		return fmt.Errorf("%w: reason: at most %d bytes, got %d", machine.ErrInvalid, MaxReviewReason, len(a.Reason))
	case !utf8.ValidString(a.Reason):
		return fmt.Errorf("%w: reason: must be UTF-8", machine.ErrInvalid)
	case a.Lean != "" && a.Decision != machine.ReviewEscalate:
		return fmt.Errorf("%w: lean: only an escalation leans, this answer is %s", machine.ErrInvalid, a.Decision)
	case a.Lean != "" && a.Lean != machine.ReviewApprove && a.Lean != machine.ReviewReject:
		return fmt.Errorf("%w: lean: want approve or reject, got %.64q", machine.ErrInvalid, a.Lean)
	}
	return nil
}

// ReviewDecision is a reviewer's answer on a call, as toolgate's own
// reviewer role hands it to the application layer.
type ReviewDecision struct {
	PendingID string `json:"pendingId"`
	// Reviewer is the name the call's policy gives the reviewer.
	Reviewer string       `json:"reviewer"`
	Answer   ReviewAnswer `json:"answer"`
}

// What came of a reviewer's answer (ReviewReply.Outcome).
const (
	ReviewApproved  = "approved"  // it approved the call
	ReviewRejected  = "rejected"  // it rejected the call
	ReviewEscalated = "escalated" // it left the call to humans, recorded
	ReviewRefused   = "refused"   // its approval was refused (recorded), the call left to humans
	ReviewAbstained = "abstained" // it had no opinion: nothing recorded
)

// ReviewReply says what came of a reviewer's answer, and the entry as it
// is after it.
type ReviewReply struct {
	Outcome string         `json:"outcome"`
	Refused string         `json:"refused,omitempty"` // why an approval was refused
	Entry   *machine.Entry `json:"entry,omitempty"`
}

// ReviewCallRequest asks for the ReviewRequest of one call and reviewer.
type ReviewCallRequest struct {
	PendingID string `json:"pendingId"`
	Reviewer  string `json:"reviewer"`
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// NameReviewerAnswers is the counter of automated reviewers' answers.
const NameReviewerAnswers = "toolgate_reviewer_answers_total"

// The answer label of ReviewerAnswers: a reviewer's own answers, and
// what is counted when it gave none (each of which leaves the call to
// humans, as an abstention does).
const (
	ReviewerApprove  = "approve"
	ReviewerReject   = "reject"
	ReviewerEscalate = "escalate"
	ReviewerAbstain  = "abstain"
	ReviewerTimeout  = "timeout" // no answer within its timeoutMs
	ReviewerError    = "error"   // unreachable, or it answered with an error status
	ReviewerInvalid  = "invalid" // it answered something that is no answer
)

// ReviewerAnswerLabels are every value of the answer label.
var ReviewerAnswerLabels = []string{ReviewerApprove, ReviewerReject, ReviewerEscalate, ReviewerAbstain, ReviewerTimeout, ReviewerError, ReviewerInvalid}

// ReviewerAnswers is toolgate_reviewer_answers_total{reviewer, answer}:
// what each reviewer the policy names answered, per process (the
// reviewer role's). The reviewer label is a name the policy gives, which
// only whoever sets the policy chooses.
type ReviewerAnswers struct{ vec *prometheus.CounterVec }

// NewReviewerAnswers returns the counter; register its Collector.
func NewReviewerAnswers() *ReviewerAnswers {
	return &ReviewerAnswers{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameReviewerAnswers,
		Help: "Answers of the policy's automated reviewers, by reviewer and answer (approve, reject, escalate, abstain; timeout, error and invalid when it gave none, each leaving the call to humans). Per process: sum across instances.",
	}, []string{"reviewer", "answer"})}
}

// Collector is what to register.
func (r *ReviewerAnswers) Collector() prometheus.Collector { return r.vec }

// ReviewerAnswer counts one answer of reviewer's; the reviewer's other
// answers' series start at 0 with it, so that a rate sees each one's
// first.
func (r *ReviewerAnswers) ReviewerAnswer(reviewer, answer string) {
	for _, a := range ReviewerAnswerLabels {
		r.vec.WithLabelValues(reviewer, a)
	}
	r.vec.WithLabelValues(reviewer, answer).Inc()
}

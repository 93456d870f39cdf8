package analytics

import (
	"slices"
	"strings"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// An automated reviewer's decisions are counted as an approver's, under
// the name it decides as (reviewer:<name>): its approvals and rejections.
// Its aggregate also counts what it left to humans (its escalations, and
// its approvals gate refused as beyond its reach), and how the humans
// then decided: a human decision against the way the reviewer leaned
// (an escalation's lean, or a refused approval, which leans to approve)
// overrules it; one the same way upholds it. An escalation without a
// lean, and a call nobody decided (timed out, cancelled), counts neither.

// ReviewerStats are a reviewer's reviews that left calls to humans.
type ReviewerStats struct {
	Escalated int64 `json:"escalated,omitempty"`
	Refused   int64 `json:"refused,omitempty"` // approvals refused as beyond its reach
	Overruled int64 `json:"overruled,omitempty"`
	Upheld    int64 `json:"upheld,omitempty"`
}

// reviewersOf are the reviewers whose aggregates ev changes besides its
// decider's: the reviewer of a review, and on a human's decision, every
// reviewer that left the call to humans leaning one way.
func reviewersOf(ev *wire.EventHead) []string {
	e := ev.Entry
	switch {
	case ev.Event == machine.EventReview:
		return []string{ev.Actor}
	case !humanDecision(ev):
		return nil
	}
	var by []string
	for _, r := range e.Reviews {
		if r.Lean != "" && !slices.Contains(by, r.By) {
			by = append(by, r.By)
		}
	}
	return by
}

// humanDecision reports whether ev is a human's approval or rejection
// (a quorum's is humans' too).
func humanDecision(ev *wire.EventHead) bool {
	return (ev.Event == machine.EventApprove || ev.Event == machine.EventReject) &&
		(ev.DecidedBy == machine.DecidedByHuman || ev.DecidedBy == machine.DecidedByQuorum)
}

// add counts ev in the stats of the reviewer name, if it is a review of
// that reviewer's or a human's decision of a call it left to humans, and
// reports whether it was one: the approver's counts are not for it then.
func (s *ReviewerStats) add(name string, ev event) bool {
	if !strings.HasPrefix(name, machine.ReviewerPrefix) {
		return false
	}
	e := ev.Entry
	switch {
	case ev.Event == machine.EventReview:
		if len(e.Reviews) == 0 {
			return true
		}
		if e.Reviews[len(e.Reviews)-1].Answer == machine.ReviewEscalate {
			s.Escalated++
		} else {
			s.Refused++
		}
		return true
	case humanDecision(ev.EventHead):
		decided := machine.ReviewReject
		if ev.Event == machine.EventApprove {
			decided = machine.ReviewApprove
		}
		// The reviewer's last lean on the call, once however often it
		// reviewed it.
		lean := ""
		for _, r := range e.Reviews {
			if r.By == name && r.Lean != "" {
				lean = r.Lean
			}
		}
		switch {
		case lean == "":
		case lean == decided:
			s.Upheld++
		default:
			s.Overruled++
		}
		return true
	}
	return false
}

func (s ReviewerStats) report() *wire.ReviewerReport {
	if s == (ReviewerStats{}) {
		return nil
	}
	r := wire.ReviewerReport(s)
	return &r
}

package worker

import "time"

// Notifies and NotifySubjects expose the notifier's choice of events, for
// a test that pins it without a channel to deliver to.
var (
	Notifies       = notifies
	NotifySubjects = notifySubjects
)

// WithNotifierClock sets the clock that dates a webhook's attempts
// (webhook-timestamp), so a test can send one its receiver finds too old.
func WithNotifierClock(now func() time.Time) NotifierOption {
	return func(n *Notifier) { n.now = now }
}

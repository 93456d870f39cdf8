package worker

// Notifies and NotifySubjects expose the notifier's choice of events, for
// a test that pins it without a channel to deliver to.
var (
	Notifies       = notifies
	NotifySubjects = notifySubjects
)

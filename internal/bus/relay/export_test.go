package relay

// FailRelay sets the relay's failure points: an error from either stops the
// relay at that point as a crash would, before it publishes or before it
// acks the revision it was given.
func FailRelay(r *Relay, beforePublish, beforeAck func(revision uint64) error) {
	r.beforePublish = beforePublish
	r.beforeAck = beforeAck
}

package bus

// FailRelay sets the relay's failure points: an error from either stops the
// relay at that point as a crash would, before it publishes or before it
// acks the revision it was given.
func FailRelay(r *Relay, beforePublish, beforeAck func(revision uint64) error) {
	r.beforePublish = beforePublish
	r.beforeAck = beforeAck
}

// Synced reports whether s answers from memory.
func (s *GrantStore) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

package bus

// BlindWrites has s's Update write without its compare-and-set, as a
// broken build would: the history checker's test plants it. It returns s.
func BlindWrites(s *KVStore) *KVStore {
	s.blind = true
	return s
}

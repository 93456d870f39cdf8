package stores

// Synced reports whether s answers from memory.
func (s *GrantStore) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

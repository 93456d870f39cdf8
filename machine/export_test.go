package machine

// CanFire reports whether the table lets ev follow from, for tests that
// walk the table.
func CanFire(from State, ev Event) bool {
	for _, t := range transitions {
		if t.Event == ev {
			for _, f := range t.From {
				if f == from {
					return true
				}
			}
		}
	}
	return false
}

// Store returns the Machine's store, for tests that need a second Machine
// over it.
func (m *Machine) Store() Store { return m.store }

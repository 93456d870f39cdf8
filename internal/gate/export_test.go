package gate

import "github.com/toolgate/toolgate/machine"

// ReserveTaker reserves, as a decision does, a request that waits at s
// for work of tool; handOver ends the reservation with the call claimed
// for it (or nil: none). ok is false when no request waits.
func ReserveTaker(s *Service, tool string) (handOver func(*machine.Entry), ok bool) {
	t := s.takers.reserve(tool)
	if t == nil {
		return nil, false
	}
	return func(e *machine.Entry) { s.takers.handOver(t, e) }, true
}

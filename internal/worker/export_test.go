package worker

import "time"

// FailSettler sets the settler's failure points: an error from either
// stops Run at that point as a crash would, before it writes the ledger or
// after it has and before it acknowledges the event at seq.
func FailSettler(s *BudgetSettler, beforeSettle, beforeAck func(seq uint64) error) {
	s.beforeSettle = beforeSettle
	s.beforeAck = beforeAck
}

// SetSettlerDurable names the settler's consumer, so that a test can run
// settlers that each see every event.
func SetSettlerDurable(s *BudgetSettler, durable string) { s.durable = durable }

// SetAckFloorInterval sets how often the settler reads its consumer's ack
// floor (default 5s).
func SetAckFloorInterval(s *BudgetSettler, d time.Duration) { s.floorEvery = d }

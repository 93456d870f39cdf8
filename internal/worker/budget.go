package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// BudgetSettlerDurable is the consumer on TOOL_EVENTS that every
// BudgetSettler process shares, and the dead-letter subject's last token.
const BudgetSettlerDurable = "budget-settler"

// BudgetSettler settles the budget of every call that ends: what the
// policy reserved of its team's daily budget at submit is released, and
// what the call actually cost is spent, on the day it reserved (or, for a
// call that reserved nothing, the day it ended).
//
// It reads the events rather than watching its own process's writes, so a
// call ended anywhere (an executor, another server, the timer) is settled,
// and a process that dies after ending a call loses nothing: the event is
// in the stream. It is one durable consumer, shared by every process that
// runs a settler, created at the stream's start so that the calls that
// ended before the first settler ran are settled too.
//
// A settlement may be delivered again (its process died after writing the
// ledger and before acknowledging) or be in two processes' hands at once
// (one stalled past the ack wait). So the ledger records, in the same
// compare-and-set as the amounts, the stream sequences it has taken in
// (stores.Spending.Applied), skips one it has, and folds everything at or
// below the consumer's ack floor, read now and then, into one number.
type BudgetSettler struct {
	conn        *bus.Conn
	ledger      *stores.BudgetLedger
	log         *slog.Logger
	durable     string
	concurrency int
	floorEvery  time.Duration

	mu      sync.Mutex
	floor   uint64    // the consumer's ack floor, as last read
	floorAt time.Time // when it was last read (or a read started)

	// beforeSettle and beforeAck, when set, are failure points for tests:
	// an error stops Run there, as a crash would, before the ledger is
	// written or after it is and before the event is acknowledged.
	beforeSettle func(seq uint64) error
	beforeAck    func(seq uint64) error
}

// BudgetSettlerOption configures a BudgetSettler.
type BudgetSettlerOption func(*BudgetSettler)

// WithSettlerConcurrency bounds how many events one process settles at once
// (default 4). Settlements of one team and day contend for one key, so more
// helps only with many teams.
func WithSettlerConcurrency(n int) BudgetSettlerOption {
	return func(s *BudgetSettler) {
		if n > 0 {
			s.concurrency = n
		}
	}
}

// NewBudgetSettler returns a settler of ledger's budgets, over the events
// of TOOL_EVENTS, read over conn. Run starts it.
func NewBudgetSettler(conn *bus.Conn, ledger *stores.BudgetLedger, log *slog.Logger, opts ...BudgetSettlerOption) *BudgetSettler {
	s := &BudgetSettler{
		conn: conn, ledger: ledger, log: log,
		durable:     BudgetSettlerDurable,
		concurrency: 4,
		floorEvery:  5 * time.Second,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// settleSubjects are the subjects of the events that can end a call.
var settleSubjects = func() []string {
	var subs []string
	seen := map[string]bool{}
	for _, ev := range machine.Events() {
		to, _ := ev.Target()
		if s, ok := wire.EventSubject(ev); ok && to.Terminal() && !seen[s] {
			seen[s] = true
			subs = append(subs, s)
		}
	}
	return subs
}()

// settlerCrash is the error of a failure point.
type settlerCrash struct{ error }

func (c settlerCrash) Unwrap() error { return c.error }

// Run settles until ctx ends or a failure point fires, then waits for the
// settlements in flight. A JetStream error restarts it after a backoff; a
// settlement that keeps failing is retried for minutes before it is
// dead-lettered, since one given up leaves its reservation held for the
// rest of the day.
func (s *BudgetSettler) Run(ctx context.Context) error {
	ctx, crash := context.WithCancelCause(ctx)
	defer crash(nil)
	r := consumer.NewRunner(s.conn.JetStream(), consumer.ConsumerConfig{
		Stream:         wire.EventsStream,
		Durable:        s.durable,
		FilterSubjects: settleSubjects,
		MaxDeliver:     20,
		Backoff:        []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second},
		Concurrency:    s.concurrency,
	}, s.log, func(ctx context.Context, msg consumer.Msg) error {
		err := s.settle(ctx, msg)
		var c settlerCrash
		if errors.As(err, &c) {
			// Stopping the runner leaves the event unacknowledged, to be
			// delivered again, as after a crash.
			crash(c)
		}
		return err
	})
	err := r.Run(ctx)
	var c settlerCrash
	if errors.As(context.Cause(ctx), &c) {
		return c.error
	}
	return err
}

// settle settles the call one event ended, if it did and has a cost.
func (s *BudgetSettler) settle(ctx context.Context, msg consumer.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return consumer.Permanent(fmt.Errorf("budget settler: %w", err))
	}
	seq := meta.Sequence.Stream
	ev, err := wire.DecodeEventHead(msg.Data())
	if err != nil || ev.Entry == nil {
		return consumer.Permanent(fmt.Errorf("budget settler: undecodable event at %d (err %v)", seq, err))
	}
	e := ev.Entry
	if !ev.To.Terminal() || (e.CostReserved == 0 && e.Cost == 0) {
		return nil
	}
	day := e.CostDay
	if day == "" {
		// The event's time, not the clock's: a redelivery after midnight
		// must settle into the same day's value, whose record would
		// otherwise not know it.
		day = time.UnixMilli(ev.At).UTC().Format("2006-01-02")
	}
	floor := s.ackFloor(ctx)
	if s.beforeSettle != nil {
		if err := s.beforeSettle(seq); err != nil {
			return settlerCrash{err}
		}
	}
	// The ledger sums micro-units: the reservation, which the policy made
	// of micro-units, is released exactly.
	settled, err := s.ledger.Settle(ctx, e.Team, day, policy.MicrosOf(e.CostReserved), policy.MicrosOf(e.Cost), seq, floor)
	if err != nil {
		return fmt.Errorf("budget settler: settle %s (team %q, %s): %w", ev.ID, e.Team, day, err)
	}
	if settled {
		s.log.Debug("budget settled", "id", ev.ID, "team", e.Team, "day", day, "released", e.CostReserved, "spent", e.Cost)
	} else {
		s.log.Debug("budget already settled", "id", ev.ID, "seq", seq)
	}
	if s.beforeAck != nil {
		if err := s.beforeAck(seq); err != nil {
			return settlerCrash{err}
		}
	}
	return nil
}

// ackFloor returns the consumer's ack floor as last read, reading it again
// when it is older than floorEvery. Every event at or below it has been
// settled (or given up on), so the ledger may fold it into its record.
// A failed read keeps the old floor: a lower one is only less compact.
func (s *BudgetSettler) ackFloor(ctx context.Context) uint64 {
	s.mu.Lock()
	floor := s.floor
	if time.Since(s.floorAt) < s.floorEvery {
		s.mu.Unlock()
		return floor
	}
	s.floorAt = time.Now() // one reader at a time; the others use the old one
	s.mu.Unlock()
	p, ok, err := consumer.Durable(ctx, s.conn.JetStream(), wire.EventsStream, s.durable)
	if !ok || err != nil {
		s.log.Debug("budget settler: reading the ack floor failed", "err", err)
		return floor
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = max(s.floor, p.AckFloor)
	return s.floor
}

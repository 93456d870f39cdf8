package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	tgpolicy "github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// budgetEnv is a bus with the relay running, a ledger, and the machine of
// a server whose policy reserves against the ledger. Its Machine has no
// observer: settling is the settler's alone.
type budgetEnv struct {
	*bustest.Env
	ledger *stores.BudgetLedger
	m      *machine.Machine
}

func startBudgetEnv(t *testing.T, topo bustest.Topology, dailyCostLimit float64) *budgetEnv {
	t.Helper()
	env := bustest.Start(t, topo)
	bustest.RunRelay(t, env.JS)
	ledger := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
	doc, err := tgpolicy.Parse(fmt.Appendf(nil, "default: {requiresApprovalTools: none, dailyCostLimit: %v}", dailyCostLimit))
	require.NoError(t, err)
	engine, err := tgpolicy.NewEngine(doc, stores.NewGrantStore(env.JS, env.Buckets.Grants), ledger)
	require.NoError(t, err)
	return &budgetEnv{Env: env, ledger: ledger, m: machine.New(env.Store, machine.WithEvaluator(engine))}
}

// settleWait bounds a wait for the settler: generous, since on a loaded
// machine a 3-node cluster takes seconds to place a consumer.
const settleWait = 30 * time.Second

// settler is a running BudgetSettler; stop ends it and returns what Run
// returned.
type settler struct {
	*worker.BudgetSettler
	stop func() error
	// ended waits for Run to return by itself (a failure point stops it),
	// without ending its context: stopping it then could win the race
	// and make Run return nil.
	ended func() error
}

func startSettler(t *testing.T, env *budgetEnv, setup func(*worker.BudgetSettler)) *settler {
	t.Helper()
	s := worker.NewBudgetSettler(env.Conn, env.ledger, bustest.Logger())
	if setup != nil {
		setup(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var err error
	wait := func(end bool) func() error {
		return func() error {
			once.Do(func() {
				if end {
					cancel()
				}
				select {
				case err = <-done:
				case <-time.After(waitFor):
					err = errors.New("settler did not stop within 10s")
				}
			})
			return err
		}
	}
	t.Cleanup(func() { cancel(); _ = wait(true)() })
	return &settler{BudgetSettler: s, stop: wait(true), ended: wait(false)}
}

// waitSettled waits until the relay has published every revision and the
// settlers of durable have acknowledged every event: after that nothing
// more will be settled, so a count that is right then is right for good.
func waitSettled(t *testing.T, env *budgetEnv, durable string) {
	t.Helper()
	bustest.WaitRelayed(t, env.JS)
	// An event a stopped settler left unacknowledged, its nak unsent,
	// comes again after the consumer's AckWait (30s).
	bustest.Eventually(t, 30*time.Second+3*waitFor, 10*time.Millisecond, fmt.Sprintf("the settlers of %s caught up", durable), func() (bool, any) {
		c, err := env.JS.Consumer(t.Context(), wire.EventsStream, durable)
		if err != nil {
			return false, err
		}
		info, err := c.Info(t.Context())
		if err != nil {
			return false, err
		}
		return info.NumPending == 0 && info.NumAckPending == 0, fmt.Sprintf("%d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
	})
}

// call submits a call for team, estimated at estimate, and returns its
// entry.
func (env *budgetEnv) call(t *testing.T, id, team string, estimate float64) *machine.Entry {
	t.Helper()
	e, err := env.m.Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "report", CallerBotID: "bot", ConversationID: "budget-" + team, Team: team, EstimatedCost: estimate})
	require.NoError(t, err)
	require.Equal(t, machine.StateScheduled, e.Status, "%s: %s", id, e.StatusReason)
	return e
}

// finish runs a call to the end on m, as an executor would, at cost.
func finish(ctx context.Context, m *machine.Machine, pendingID string, cost float64) error {
	if _, err := m.Claim(ctx, pendingID, "exec", time.Minute); err != nil {
		return err
	}
	_, err := m.Complete(ctx, pendingID, machine.Outcome{Holder: "exec", Cost: cost})
	return err
}

func (env *budgetEnv) spending(t *testing.T, team, day string) stores.Spending {
	t.Helper()
	s, err := env.ledger.Get(t.Context(), team, day)
	require.NoError(t, err)
	return s
}

// seqRecorder is a failure point that fails nothing and records the
// sequences it sees.
type seqRecorder struct {
	mu   sync.Mutex
	seqs []uint64
}

func (r *seqRecorder) record(seq uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seqs = append(r.seqs, seq)
	return nil
}

func (r *seqRecorder) seen() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs)
}

// The regression: a call an executor runs, through a Machine that knows
// nothing of budgets, is settled.
func TestBudgetSettler_ExecutorRunCallSettles(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			env := startBudgetEnv(t, topo, 10)
			startSettler(t, env, nil)
			executor := machine.New(env.Store)

			e := env.call(t, "report-1", "research", 3)
			assert.Equal(t, 3.0, e.CostReserved)
			assert.Equal(t, 3.0, env.spending(t, "research", e.CostDay).Reserved.Float64())
			require.NoError(t, finish(t.Context(), executor, e.PendingID, 2))

			bustest.Eventually(t, settleWait, 10*time.Millisecond, "research: 0 reserved, 2 spent", func() (bool, any) {
				s := env.spending(t, "research", e.CostDay)
				got := [2]float64{s.Reserved.Float64(), s.Spent.Float64()}
				return got == [2]float64{0, 2}, fmt.Sprintf("reserved and spent %v", got)
			})
			waitSettled(t, env, worker.BudgetSettlerDurable)
			s := env.spending(t, "research", e.CostDay)
			assert.Equal(t, 0.0, s.Reserved.Float64())
			assert.Equal(t, 2.0, s.Spent.Float64())

			// What the estimate held back is the team's again: 2 + 8 fits
			// in 10, where 3 + 2 + 8 would not have.
			next := env.call(t, "report-2", "research", 8)
			assert.Equal(t, 8.0, next.CostReserved)
		})
	}
}

func TestBudgetSettler_CallThatNeverRanReleasesItsReservation(t *testing.T) {
	t.Parallel()
	env := startBudgetEnv(t, bustest.Topologies[0], 10)
	startSettler(t, env, nil)

	cancelled := env.call(t, "cancelled", "ops", 3)
	failed := env.call(t, "failed", "ops", 4)
	assert.Equal(t, 7.0, env.spending(t, "ops", cancelled.CostDay).Reserved.Float64())
	_, err := env.m.Cancel(t.Context(), cancelled.PendingID, "alice", "not today")
	require.NoError(t, err)
	_, err = env.m.Claim(t.Context(), failed.PendingID, "exec", time.Minute)
	require.NoError(t, err)
	_, err = env.m.Fail(t.Context(), failed.PendingID, machine.Outcome{Holder: "exec", Error: "refused before it cost anything"})
	require.NoError(t, err)

	bustest.Eventually(t, settleWait, 10*time.Millisecond, "both reservations released, nothing spent", func() (bool, any) {
		s := env.spending(t, "ops", cancelled.CostDay)
		got := [2]float64{s.Reserved.Float64(), s.Spent.Float64()}
		return got == [2]float64{0, 0}, fmt.Sprintf("reserved and spent %v", got)
	})
	waitSettled(t, env, worker.BudgetSettlerDurable)
	s := env.spending(t, "ops", cancelled.CostDay)
	assert.Equal(t, [2]float64{0, 0}, [2]float64{s.Reserved.Float64(), s.Spent.Float64()}, "and no more after")
}

func TestBudgetSettler_SettlesOnceThoughEverythingIsRedelivered(t *testing.T) {
	t.Parallel()
	env := startBudgetEnv(t, bustest.Topologies[0], 1000)
	first := startSettler(t, env, func(s *worker.BudgetSettler) { worker.SetAckFloorInterval(s, 0) })

	const calls = 20
	var day string
	for i := range calls {
		e := env.call(t, fmt.Sprint("call-", i), "research", 1)
		day = e.CostDay
		require.NoError(t, finish(t.Context(), env.m, e.PendingID, 0.5))
	}
	other := env.call(t, "other", "ops", 2)
	require.NoError(t, finish(t.Context(), env.m, other.PendingID, 1.25))
	waitSettled(t, env, worker.BudgetSettlerDurable)
	s := env.spending(t, "research", day)
	assert.Equal(t, 0.0, s.Reserved.Float64())
	assert.Equal(t, calls*0.5, s.Spent.Float64())
	assert.Positive(t, s.Applied.Floor, "the record folds into the ack floor")
	assert.Less(t, len(s.Applied.Ranges), calls/2, "the record stays small: %+v", s.Applied)
	require.NoError(t, first.stop())

	// A consumer created again delivers the stream from its start: every
	// settlement a second time.
	require.NoError(t, env.JS.DeleteConsumer(t.Context(), wire.EventsStream, worker.BudgetSettlerDurable))
	seen := &seqRecorder{}
	startSettler(t, env, func(s *worker.BudgetSettler) { worker.FailSettler(s, seen.record, nil) })
	bustest.Eventually(t, settleWait, 10*time.Millisecond, fmt.Sprintf("%d events seen, one redelivered", calls+1), func() (bool, any) { n := len(seen.seen()); return n >= calls+1, n })
	waitSettled(t, env, worker.BudgetSettlerDurable)
	assert.Len(t, seen.seen(), calls+1, "each settlement delivered once more")
	s = env.spending(t, "research", day)
	assert.Equal(t, 0.0, s.Reserved.Float64())
	assert.Equal(t, calls*0.5, s.Spent.Float64(), "redelivered, counted once")
	o := env.spending(t, "ops", other.CostDay)
	assert.Equal(t, 0.0, o.Reserved.Float64())
	assert.Equal(t, 1.25, o.Spent.Float64())
}

func TestBudgetSettler_RacingSettlersCountEachCallOnce(t *testing.T) {
	t.Parallel()
	env := startBudgetEnv(t, bustest.Topologies[0], 1000)
	// Two settlers share the consumer, as two processes would; a third,
	// on a consumer of its own, is handed every event they are, and races
	// them for each.
	startSettler(t, env, nil)
	startSettler(t, env, func(s *worker.BudgetSettler) { worker.SetAckFloorInterval(s, 0) })
	const twin = "budget-settler-twin"
	startSettler(t, env, func(s *worker.BudgetSettler) {
		worker.SetSettlerDurable(s, twin)
		worker.SetAckFloorInterval(s, 0)
	})

	teams := []string{"ops", "research", "finance"}
	costs := []float64{0.07, 0.06, 0.01, 0.2} // float64 sums of these depend on their order
	want := map[string]tgpolicy.Micros{}
	var days sync.Map
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(8)
	for i := range 60 {
		team, cost := teams[i%len(teams)], costs[i%len(costs)]
		if i%5 != 4 {
			want[team] += tgpolicy.MicrosOf(cost)
		}
		g.Go(func() error {
			e, err := env.m.Submit(ctx, machine.Call{ToolCallID: fmt.Sprint("race-", i), ToolName: "report", CallerBotID: "bot", ConversationID: "race", Team: team, EstimatedCost: 2})
			if err != nil {
				return err
			}
			days.Store(team, e.CostDay)
			if i%5 == 4 {
				_, err := env.m.Cancel(ctx, e.PendingID, "alice", "")
				return err
			}
			return finish(ctx, env.m, e.PendingID, cost)
		})
	}
	require.NoError(t, g.Wait())

	waitSettled(t, env, worker.BudgetSettlerDurable)
	waitSettled(t, env, twin)
	for _, team := range teams {
		day, _ := days.Load(team)
		s := env.spending(t, team, day.(string))
		assert.Equal(t, tgpolicy.Micros(0), s.Reserved, team)
		assert.Equal(t, want[team], s.Spent, team)
	}
}

var errCrash = errors.New("crash")

func TestBudgetSettler_CrashAfterTheWriteBeforeTheAck(t *testing.T) {
	t.Parallel()
	env := startBudgetEnv(t, bustest.Topologies[0], 10)
	var crashedAt uint64
	crashing := startSettler(t, env, func(s *worker.BudgetSettler) {
		worker.FailSettler(s, nil, func(seq uint64) error { crashedAt = seq; return errCrash })
	})

	e := env.call(t, "report", "research", 3)
	require.NoError(t, finish(t.Context(), machine.New(env.Store), e.PendingID, 2))
	bustest.Eventually(t, settleWait, 10*time.Millisecond, "research spent 2", func() (bool, any) {
		got := env.spending(t, "research", e.CostDay).Spent.Float64()
		return got == 2.0, got
	})
	require.ErrorIs(t, crashing.ended(), errCrash, "Run stops at the failure point")
	require.NotZero(t, crashedAt)

	seen := &seqRecorder{}
	startSettler(t, env, func(s *worker.BudgetSettler) { worker.FailSettler(s, seen.record, nil) })
	waitSettled(t, env, worker.BudgetSettlerDurable)
	assert.Equal(t, []uint64{crashedAt}, seen.seen(), "the unacknowledged event is delivered again")
	s := env.spending(t, "research", e.CostDay)
	assert.Equal(t, 0.0, s.Reserved.Float64())
	assert.Equal(t, 2.0, s.Spent.Float64(), "and counted once")
}

func TestBudgetSettler_CrashBeforeTheWrite(t *testing.T) {
	t.Parallel()
	env := startBudgetEnv(t, bustest.Topologies[0], 10)
	reached := make(chan uint64, 1)
	crashing := startSettler(t, env, func(s *worker.BudgetSettler) {
		worker.FailSettler(s, func(seq uint64) error {
			select {
			case reached <- seq:
			default:
			}
			return errCrash
		}, nil)
	})

	e := env.call(t, "report", "research", 3)
	require.NoError(t, finish(t.Context(), machine.New(env.Store), e.PendingID, 2))
	var crashedAt uint64
	select {
	case crashedAt = <-reached:
	case <-time.After(waitFor):
		t.Fatal("the settler never reached the event")
	}
	require.ErrorIs(t, crashing.ended(), errCrash)
	s := env.spending(t, "research", e.CostDay)
	assert.Equal(t, stores.Spending{Reserved: tgpolicy.MicrosOf(3)}, s, "nothing written yet")

	seen := &seqRecorder{}
	startSettler(t, env, func(s *worker.BudgetSettler) { worker.FailSettler(s, seen.record, nil) })
	waitSettled(t, env, worker.BudgetSettlerDurable)
	assert.Equal(t, []uint64{crashedAt}, seen.seen())
	s = env.spending(t, "research", e.CostDay)
	assert.Equal(t, 0.0, s.Reserved.Float64())
	assert.Equal(t, 2.0, s.Spent.Float64(), "settled once, after the restart")
}

// TestBudgetSettler_SumsAreExact: thirteen calls estimated at 0.01 fit a
// daily limit of 0.13 exactly, a fourteenth does not, and settled at 0.01
// each they have spent 0.13, not a float64 sum's 0.13000000000000003.
func TestBudgetSettler_SumsAreExact(t *testing.T) {
	t.Parallel()
	env := startBudgetEnv(t, bustest.Topologies[0], 0.13)
	startSettler(t, env, nil)
	var day string
	var ids []string
	for i := range 13 {
		e := env.call(t, fmt.Sprint("cent-", i), "ops", 0.01)
		day = e.CostDay
		ids = append(ids, e.PendingID)
	}
	assert.Equal(t, tgpolicy.Micros(130_000), env.spending(t, "ops", day).Reserved)
	over, err := env.m.Submit(t.Context(), machine.Call{ToolCallID: "cent-13", ToolName: "report", CallerBotID: "bot", ConversationID: "budget-ops", Team: "ops", EstimatedCost: 0.01})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, over.Status, "the limit is reached: %s", over.StatusReason)
	for _, id := range ids {
		require.NoError(t, finish(t.Context(), env.m, id, 0.01))
	}
	waitSettled(t, env, worker.BudgetSettlerDurable)
	s := env.spending(t, "ops", day)
	assert.Equal(t, tgpolicy.Micros(0), s.Reserved)
	assert.Equal(t, tgpolicy.Micros(130_000), s.Spent)
	assert.Equal(t, "0.13", s.Spent.String())

	// 0.07 + 0.06 is 0.13 too: another team's limit of 0.13 holds both.
	e7 := env.call(t, "seven", "research", 0.07)
	e6 := env.call(t, "six", "research", 0.06)
	require.NoError(t, finish(t.Context(), env.m, e7.PendingID, 0.07))
	require.NoError(t, finish(t.Context(), env.m, e6.PendingID, 0.06))
	waitSettled(t, env, worker.BudgetSettlerDurable)
	s = env.spending(t, "research", e7.CostDay)
	assert.Equal(t, [2]tgpolicy.Micros{0, 130_000}, [2]tgpolicy.Micros{s.Reserved, s.Spent}, "reserved and spent")
}

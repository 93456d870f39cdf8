package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/history"
	"github.com/toolgate/toolgate/machine"
)

// rendezvous holds the first two callers of wait until both have come,
// and lets every later one through: two commands that both read an
// entry before either writes it.
type rendezvous struct {
	mu      sync.Mutex
	arrived int
	both    chan struct{}
}

func newRendezvous() *rendezvous { return &rendezvous{both: make(chan struct{})} }

func (r *rendezvous) wait() {
	r.mu.Lock()
	r.arrived++
	if r.arrived == 2 {
		close(r.both)
	}
	first := r.arrived <= 2
	r.mu.Unlock()
	if first {
		select {
		case <-r.both:
		case <-time.After(10 * time.Second):
		}
	}
}

// TestBlindWrites_TheHistoryCheckerCatchesThem races an approval and a
// rejection of each call from two machines over two stores (two
// processes), each having read the entry before either writes (the
// machines' clock, read between the read and the write, holds them
// together), and checks the history with internal/history. With the
// stores' compare-and-set one decision wins and the other is refused;
// with the compare-and-set replaced by a blind write (the broken build)
// both are told they decided, and the checker says so.
func TestBlindWrites_TheHistoryCheckerCatchesThem(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topology{Name: "single", Replicas: 1})
	for _, blind := range []bool{false, true} {
		name := "compare-and-set"
		if blind {
			name = "blind write"
		}
		t.Run(name, func(t *testing.T) {
			var round *rendezvous
			var roundMu sync.Mutex
			clock := func() time.Time {
				roundMu.Lock()
				r := round
				roundMu.Unlock()
				if r != nil {
					r.wait()
				}
				return time.Now()
			}
			storeA, storeB := bus.NewKVStore(env.JS, env.KV), bus.NewKVStore(env.JS, env.KV)
			if blind {
				bus.BlindWrites(storeA)
				bus.BlindWrites(storeB)
			}
			a, b := machine.New(storeA, machine.WithClock(clock)), machine.New(storeB, machine.WithClock(clock))
			var rec history.Recorder
			ctx := t.Context()
			var ids []string
			for i := range 5 {
				call := machine.Call{ToolCallID: fmt.Sprintf("c%d", i), ToolName: "deploy", CallerBotID: "agent", ConversationID: name}
				sub := rec.Invoke(machine.PendingID(call.ConversationID, call.ToolCallID), "agent", history.Submit)
				e, err := a.Submit(ctx, call)
				require.NoError(t, err)
				sub.Answered(e.Status)
				ids = append(ids, e.PendingID)

				roundMu.Lock()
				round = newRendezvous()
				roundMu.Unlock()
				var both sync.WaitGroup
				for _, d := range []struct {
					m       *machine.Machine
					by      string
					approve bool
				}{{a, "alice", true}, {b, "bob", false}} {
					both.Go(func() {
						op := rec.Invoke(e.PendingID, d.by, history.Decide).Decision(d.approve)
						got, err := d.m.Decide(ctx, e.PendingID, machine.Decision{Approve: d.approve, By: d.by})
						var te *machine.TransitionError
						switch {
						case err == nil:
							op.Answered(got.Status)
						case errors.As(err, &te):
							op.Refused(te.Entry.Status, err)
						default:
							op.Unanswered(err)
						}
					})
				}
				both.Wait()
				roundMu.Lock()
				round = nil
				roundMu.Unlock()
			}
			r := history.Check(rec.Ops(), history.Facts{Revisions: revisions(t, env.KV, ids), ReadAt: time.Now()})
			if !blind {
				// Each call is decided once, and (nothing runs it) stays
				// approved or ends rejected: the only findings are the
				// approved calls that never end.
				for _, v := range r.Violations {
					assert.Equal(t, history.RuleOneTerminal, v.Rule, "%s", v)
				}
				return
			}
			var lin, lost int
			for _, v := range r.Violations {
				switch v.Rule {
				case history.RuleLinearizable:
					lin++
				case history.RuleTable:
					lost++
				}
			}
			assert.Equal(t, 5, lin, "every call's approval and rejection were both answered as made:\n%s", r)
			assert.Equal(t, 5, lost, "every call's second decision was written over the first:\n%s", r)
			assert.Contains(t, r.String(), "a write that did not see the one before (a lost update)")
		})
	}
}

// revisions reads every stored write of ids from kv.
func revisions(t *testing.T, kv jetstream.KeyValue, ids []string) map[string][]history.Revision {
	t.Helper()
	out := map[string][]history.Revision{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		hist, err := kv.History(ctx, id)
		require.NoError(t, err)
		for _, kve := range hist {
			var e machine.Entry
			require.NoError(t, json.Unmarshal(kve.Value(), &e))
			out[id] = append(out[id], history.Revision{Seq: kve.Revision(), Entry: &e})
		}
	}
	return out
}

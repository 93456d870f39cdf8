package machine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestRace_DecisionsTimeoutsAndCancels races 16 goroutines (approve, reject,
// time out, cancel: four of each) on every one of 200 entries, with the
// relay running. Every command either moves the entry or is refused with a
// conflict; afterwards each entry is in exactly the state its winning
// commands lead to, and TOOL_EVENTS holds exactly one event per transition.
func TestRace_DecisionsTimeoutsAndCancels(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			// 3,200 commands racing on each topology, the 16-way race
			// 200 times over, which races every pair of commands many
			// times (under -race, each 200 entries cost a topology
			// about 5 s of the suite's CPU).
			entries := 200
			raceEntries(t, topo, entries)
		})
	}
}

func raceEntries(t *testing.T, topo bustest.Topology, entries int) {
	env := bustest.Start(t, topo)
	ctx := t.Context()
	bustest.RunRelay(t, env.JS)

	// Due at once, so the timeout is as eligible as any decision.
	m := machine.New(env.Store, verdict(machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Nanosecond, AutoRejectOnTimeout: true}))
	conv := "race"
	ids := make([]string, entries)
	{
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(32)
		for i := range ids {
			g.Go(func() error {
				e, err := m.Submit(gctx, call(conv, fmt.Sprintf("call_%d", i)))
				if err == nil {
					ids[i] = e.PendingID
				}
				return err
			})
		}
		require.NoError(t, g.Wait())
	}

	type win struct {
		event    machine.Event
		from, to machine.State
	}
	var mu sync.Mutex
	wins := map[string][]win{}
	racers := []func(id string) (*machine.Entry, error){
		func(id string) (*machine.Entry, error) {
			return m.Decide(ctx, id, machine.Decision{Approve: true, By: "alice"})
		},
		func(id string) (*machine.Entry, error) {
			return m.Decide(ctx, id, machine.Decision{Approve: false, By: "bob", Reason: "no"})
		},
		func(id string) (*machine.Entry, error) { return m.Expire(ctx, id) },
		func(id string) (*machine.Entry, error) { return m.Cancel(ctx, id, "system", "swarm stopped") },
	}
	g := new(errgroup.Group)
	g.SetLimit(256)
	for _, id := range ids {
		for r := range 16 {
			g.Go(func() error {
				e, err := racers[r%4](id)
				if errors.Is(err, machine.ErrConflict) {
					return nil
				}
				if err != nil {
					return err
				}
				mu.Lock()
				wins[id] = append(wins[id], win{e.LastTransition.Event, e.LastTransition.From, e.Status})
				mu.Unlock()
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())
	// Winners record themselves after their write returns, so put each
	// entry's wins back in the order of the chain they form.
	for _, w := range wins {
		slices.SortFunc(w, func(a, b win) int {
			if a.from == machine.StatePendingApproval {
				return -1
			}
			if b.from == machine.StatePendingApproval {
				return 1
			}
			return 0
		})
	}

	// Each entry: one decision (approve, reject, timeout or cancel) won,
	// and a cancel may follow an approval; nothing else.
	wantEvents := entries // the ask of each submit
	for _, id := range ids {
		e, err := m.Get(ctx, id)
		require.NoError(t, err)
		w := wins[id]
		wantEvents += len(w)
		require.NotEmpty(t, w, id)
		require.LessOrEqual(t, len(w), 2, "%s: %v", id, w)
		if len(w) == 2 {
			assert.Equal(t, machine.EventApprove, w[0].event, "%s: %v", id, w)
			assert.Equal(t, machine.EventCancel, w[1].event, "%s: %v", id, w)
		}
		assert.Equal(t, w[len(w)-1].to, e.Status, id)
		if e.Status != machine.StateApproved {
			assert.True(t, e.Status.Terminal(), "%s ends in %s", id, e.Status)
		}
	}

	// TOOL_EVENTS: exactly one event per transition, and for each entry
	// they tell the same story as the winners did.
	stream, err := env.JS.Stream(ctx, wire.EventsStream)
	require.NoError(t, err)
	bustest.Eventually(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("%d events arrived", wantEvents), func() (bool, any) {
		info, err := stream.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.State.Msgs >= uint64(wantEvents), info.State.Msgs
	})
	events := readEvents(t, env.JS, wantEvents)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(wantEvents), info.State.Msgs, "one event per transition, none doubled")

	perEntry := map[string][]wire.Event{}
	for _, ev := range events {
		perEntry[ev.Entry.PendingID] = append(perEntry[ev.Entry.PendingID], ev)
	}
	for _, id := range ids {
		got := perEntry[id]
		require.Len(t, got, 1+len(wins[id]), id)
		assert.Equal(t, machine.EventAsk, got[0].Event, id)
		assert.Equal(t, wire.SubjectApprovalRequired, got[0].Type, id)
		for i, w := range wins[id] {
			assert.Equal(t, w.event, got[i+1].Event, id)
			assert.Equal(t, w.to, got[i+1].To, id)
			assert.Equal(t, got[i].To, got[i+1].From, "%s: events chain", id)
		}
	}
}

// readEvents reads n events from TOOL_EVENTS with an ordered consumer.
func readEvents(t *testing.T, js jetstream.JetStream, n int) []wire.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, wire.EventsStream, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	events := make([]wire.Event, 0, n)
	for len(events) < n {
		require.NoError(t, ctx.Err(), "read %d of %d events", len(events), n)
		batch, err := cons.Fetch(min(n-len(events), 1000), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			var ev wire.Event
			require.NoError(t, json.Unmarshal(msg.Data(), &ev))
			assert.Equal(t, msg.Subject(), ev.Type)
			assert.Equal(t, fmt.Sprintf("%s:%d", ev.Entry.PendingID, ev.Revision), ev.ID)
			events = append(events, ev)
		}
		// A fetch no server answered (in a cluster, the consumer the
		// ordered consumer re-created has no leader yet) is tried again:
		// the next fetch resumes after the last event read.
		if err := batch.Error(); !errors.Is(err, nats.ErrNoResponders) {
			require.NoError(t, err, "after %d of %d events", len(events), n)
		}
	}
	return events
}

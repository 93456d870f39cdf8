package relay_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

var errCrash = errors.New("injected crash")

// startRelay runs a relay until the test ends or it stops by itself; the
// returned channel gets its result.
func startRelay(t *testing.T, js jetstream.JetStream, configure func(*relay.Relay)) (stop func(), done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := relay.NewRelay(js, relay.RelayConfig{AckWait: 500 * time.Millisecond}, bustest.Logger())
	if configure != nil {
		configure(r)
	}
	ch := make(chan error, 1)
	go func() { ch <- r.Run(ctx) }()
	t.Cleanup(cancel)
	return cancel, ch
}

func submitter(env *bustest.Env, v machine.Verdict) *machine.Machine {
	return machine.New(env.Store, machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return v, nil
	})))
}

func submit(t *testing.T, m *machine.Machine, conv, id string) *machine.Entry {
	t.Helper()
	e, err := m.Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "web_search", Arguments: json.RawMessage(`{"query":"nats"}`), CallerBotID: "bot", ConversationID: conv})
	require.NoError(t, err)
	return e
}

// streamMsgs waits until the relay has acked every revision written so
// far, then returns every message in stream. Counting after the relay is
// drained, rather than as soon as n messages are in, is what lets a test
// see a duplicate.
func streamMsgs(t *testing.T, js jetstream.JetStream, stream string, n int) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := t.Context()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	var info *jetstream.StreamInfo
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the relay caught up", func() (bool, any) {
		if !bustest.Relayed(ctx, js) {
			return false, "the relay behind the bucket"
		}
		info, err = s.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.State.Msgs >= uint64(n), fmt.Sprintf("%d of %d events", info.State.Msgs, n)
	})
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	require.Len(t, msgs, n, "messages in %s", stream)
	return msgs
}

func decodeEvent(t *testing.T, data []byte) wire.Event {
	t.Helper()
	var ev wire.Event
	require.NoError(t, json.Unmarshal(data, &ev))
	return ev
}

func TestRelay_PublishesEachTransitionOnItsSubject(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			env := bustest.Start(t, topo)
			ctx := t.Context()
			startRelay(t, env.JS, nil)

			// Subscribed like `nats sub tool.approval_required`.
			sub, err := env.NC.SubscribeSync(wire.SubjectApprovalRequired)
			require.NoError(t, err)

			asker := submitter(env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute})
			e := submit(t, asker, "relay", "c1")
			_, err = asker.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Reason: "ok"})
			require.NoError(t, err)
			runner := submitter(env, machine.Verdict{Action: machine.ActionRun})
			submit(t, runner, "relay", "c2")
			later := submitter(env, machine.Verdict{Action: machine.ActionRun, Delay: time.Hour})
			submit(t, later, "relay", "c3")
			denier := submitter(env, machine.Verdict{Action: machine.ActionDeny, Reason: "rules.deny"})
			submit(t, denier, "relay", "c4")

			msgs := streamMsgs(t, env.JS, wire.EventsStream, 5)
			require.Len(t, msgs, 5)
			var subjects []string
			for _, m := range msgs {
				subjects = append(subjects, m.Subject)
			}
			assert.Equal(t, []string{wire.SubjectApprovalRequired, wire.SubjectApprovalGranted, wire.SubjectScheduledExecution, wire.SubjectScheduledExecution, wire.SubjectPolicyDenied}, subjects)

			granted := decodeEvent(t, msgs[1].Data)
			assert.Equal(t, machine.EventApprove, granted.Event)
			assert.Equal(t, machine.StatePendingApproval, granted.From)
			assert.Equal(t, machine.StateApproved, granted.To)
			assert.Equal(t, "alice", granted.Actor)
			assert.Equal(t, "ok", granted.Reason)
			assert.Equal(t, fmt.Sprintf("%s:%d", e.PendingID, granted.Revision), granted.ID)
			assert.Equal(t, granted.ID, msgs[1].Header.Get(jetstream.MsgIDHeader))
			assert.Equal(t, "alice", granted.Entry.ApprovedOrRejectedByUserID)

			plain, err := sub.NextMsg(5 * time.Second)
			require.NoError(t, err)
			assert.Equal(t, e.PendingID, decodeEvent(t, plain.Data).Entry.PendingID)
		})
	}
}

func TestRelay_PublishesNothingForASilentEvent(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	startRelay(t, env.JS, nil)

	runner := submitter(env, machine.Verdict{Action: machine.ActionRun})
	e := submit(t, runner, "silent", "c1")
	_, err := runner.Claim(ctx, e.PendingID, "exec-1", time.Minute)
	require.NoError(t, err)
	beat, err := runner.Heartbeat(ctx, e.PendingID, "exec-1", time.Hour)
	require.NoError(t, err)
	require.True(t, beat.LastTransition.Event.Silent())
	_, err = runner.Complete(ctx, e.PendingID, machine.Outcome{Holder: "exec-1", Result: json.RawMessage(`1`)})
	require.NoError(t, err)

	// The relay is drained past the heartbeat's revision once the success
	// after it is in, so a heartbeat event would be in by now too.
	var events []machine.Event
	for _, m := range streamMsgs(t, env.JS, wire.EventsStream, 3) {
		events = append(events, decodeEvent(t, m.Data).Event)
	}
	assert.Equal(t, []machine.Event{machine.EventSchedule, machine.EventStart, machine.EventSucceed}, events)
}

func TestRelay_CrashBeforePublishLosesNothing(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			env := bustest.Start(t, topo)
			m := submitter(env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute})
			for i := range 10 {
				submit(t, m, "crash", fmt.Sprint("c", i))
			}
			// The relay dies as it is about to publish the 6th revision.
			var seen atomic.Int32
			_, done := startRelay(t, env.JS, func(r *relay.Relay) {
				relay.FailRelay(r, func(uint64) error {
					if seen.Add(1) == 6 {
						return errCrash
					}
					return nil
				}, nil)
			})
			require.ErrorIs(t, <-done, errCrash)

			// A fresh relay on the same consumer publishes the rest, and
			// every event exactly once.
			startRelay(t, env.JS, nil)
			assertEventsOnce(t, env, 10)
		})
	}
}

func TestRelay_CrashAfterPublishBeforeAckDoublesNothing(t *testing.T) {
	t.Parallel()
	for _, topo := range bustest.Topologies {
		t.Run(topo.Name, func(t *testing.T) {
			t.Parallel()
			env := bustest.Start(t, topo)
			m := submitter(env, machine.Verdict{Action: machine.ActionRun})
			for i := range 10 {
				submit(t, m, "crash", fmt.Sprint("c", i))
			}
			// Every publish reaches the stream, but the relay dies before
			// acking the first revision, so all ten are delivered again.
			_, done := startRelay(t, env.JS, func(r *relay.Relay) {
				relay.FailRelay(r, nil, func(uint64) error { return errCrash })
			})
			require.ErrorIs(t, <-done, errCrash)
			startRelay(t, env.JS, nil)
			assertEventsOnce(t, env, 10)
		})
	}
}

func TestRelay_ResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	m := submitter(env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute})
	stop, done := startRelay(t, env.JS, nil)
	for i := range 5 {
		submit(t, m, "resume", fmt.Sprint("a", i))
	}
	assertEventsOnce(t, env, 5)
	stop()
	require.NoError(t, <-done, "a stopped relay returns nil")

	for i := range 5 {
		submit(t, m, "resume", fmt.Sprint("b", i))
	}
	startRelay(t, env.JS, nil)
	assertEventsOnce(t, env, 10)
}

// assertEventsOnce waits for n events and checks each revision's event
// is there exactly once.
func assertEventsOnce(t *testing.T, env *bustest.Env, n int) {
	t.Helper()
	msgs := streamMsgs(t, env.JS, wire.EventsStream, n)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[decodeEvent(t, m.Data).ID]++
	}
	assert.Len(t, msgs, n)
	assert.Len(t, seen, n)
	for id, c := range seen {
		assert.Equal(t, 1, c, id)
	}
}

func TestRelay_StartsAgainWhenItsConsumerIsDeleted(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	m := submitter(env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute})
	_, done := startRelay(t, env.JS, nil)
	for i := range 5 {
		submit(t, m, "gone", fmt.Sprint("a", i))
	}
	assertEventsOnce(t, env, 5)
	require.NoError(t, env.JS.DeleteConsumer(t.Context(), "KV_"+wire.CallsBucket, relay.RelayDurable))
	for i := range 5 {
		submit(t, m, "gone", fmt.Sprint("b", i))
	}
	// The new consumer replays every revision; the first five are dropped
	// as duplicates.
	assertEventsOnce(t, env, 10)
	select {
	case err := <-done:
		t.Fatalf("the relay stopped: %v", err)
	default:
	}
}

// Every event the relay publishes is what the contract's JSON Schema
// (wire.EventSchema, served at /v1/schemas/event.json) says it is, over a
// lifecycle that fills the envelope's optional parts: an edited approval,
// a lease, a result, a rejection, a cancel and a denial.
func TestRelay_EventsMatchTheirSchema(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	startRelay(t, env.JS, nil)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(wire.EventSchema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("event.json", doc))
	schema, err := c.Compile("event.json")
	require.NoError(t, err)

	asker := submitter(env, machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute})
	e := submit(t, asker, "schema", "c1")
	_, err = asker.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Reason: "ok", Arguments: json.RawMessage(`{"query":"nats kv"}`)})
	require.NoError(t, err)
	_, err = asker.Claim(ctx, e.PendingID, "x/1", time.Minute)
	require.NoError(t, err)
	_, err = asker.Complete(ctx, e.PendingID, machine.Outcome{Holder: "x/1", Result: json.RawMessage(`{"hits":3}`), Cost: 0.5})
	require.NoError(t, err)
	rejected := submit(t, asker, "schema", "c2")
	_, err = asker.Decide(ctx, rejected.PendingID, machine.Decision{By: "bob", Reason: "no"})
	require.NoError(t, err)
	later := submit(t, submitter(env, machine.Verdict{Action: machine.ActionRun, Delay: time.Hour}), "schema", "c3")
	_, err = asker.Cancel(ctx, later.PendingID, "bot", "changed my mind")
	require.NoError(t, err)
	submit(t, submitter(env, machine.Verdict{Action: machine.ActionDeny, Reason: "rules.deny"}), "schema", "c4")

	msgs := streamMsgs(t, env.JS, wire.EventsStream, 9)
	for _, m := range msgs {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Data))
		require.NoError(t, err)
		assert.NoError(t, schema.Validate(v), "%s: %s", m.Subject, m.Data)
		assert.Equal(t, m.Subject, decodeEvent(t, m.Data).Type)
	}
	assert.Contains(t, string(msgs[len(msgs)-1].Data), `"v":1`)
}

// TestRelay_OneWriteOfTwoTransitionsPublishesBoth: an approval whose
// write also claimed the call is two events, in the order made, each
// with its own ID and receipt; the agent hears of the revision once.
func TestRelay_OneWriteOfTwoTransitionsPublishesBoth(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	startRelay(t, env.JS, nil)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	asker := machine.New(env.Store, machine.WithSigner(relaySigner{key}), machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Minute}, nil
	})))
	e := submit(t, asker, "relay-two", "c1")
	sub, err := env.NC.SubscribeSync(wire.EntrySubject(e.CallerBotID, e.PendingID))
	require.NoError(t, err)
	require.NoError(t, env.NC.Flush())
	got, err := asker.Decide(ctx, e.PendingID, machine.Decision{Approve: true, By: "alice", Claim: &machine.Claimant{Holder: "exec-1", Lease: time.Minute}})
	require.NoError(t, err)
	require.Equal(t, machine.StateExecuting, got.Status)

	msgs := streamMsgs(t, env.JS, wire.EventsStream, 3)
	assert.Equal(t, []string{wire.SubjectApprovalRequired, wire.SubjectApprovalGranted, wire.SubjectExecutionStarted},
		[]string{msgs[0].Subject, msgs[1].Subject, msgs[2].Subject})
	granted, started := decodeEvent(t, msgs[1].Data), decodeEvent(t, msgs[2].Data)
	assert.Equal(t, granted.Revision, started.Revision)
	assert.Equal(t, fmt.Sprintf("%s:%d.approve", e.PendingID, granted.Revision), granted.ID)
	assert.Equal(t, fmt.Sprintf("%s:%d", e.PendingID, started.Revision), started.ID)
	assert.Equal(t, granted.ID, msgs[1].Header.Get(jetstream.MsgIDHeader))
	assert.Equal(t, "alice", granted.Actor)
	assert.Equal(t, machine.StateApproved, granted.To)
	assert.Equal(t, "exec-1", started.Actor)
	assert.Equal(t, machine.StateExecuting, started.To)
	require.NotNil(t, granted.Receipt)
	require.NotNil(t, started.Receipt)
	assert.Equal(t, got.Receipts[1], *granted.Receipt)
	assert.Equal(t, got.Receipts[2], *started.Receipt)

	// The agent hears of the revision once, as its last event (and may
	// hear of the submit's before, subscribed while it was relayed).
	var heard []string
	for !slices.Contains(heard, started.ID) {
		msg, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err, "announcements heard: %v", heard)
		heard = append(heard, decodeEvent(t, msg.Data).ID)
	}
	_, err = sub.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "announced after %v", heard)
	assert.NotContains(t, heard, granted.ID)
}

type relaySigner struct{ key ed25519.PrivateKey }

func (s relaySigner) PublicKey() string { return "ed25519:test" }

func (s relaySigner) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.key, msg), nil }

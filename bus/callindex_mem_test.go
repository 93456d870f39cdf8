package bus

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/machine"
)

// fakeKVE is a message of the bucket's stream as the watch delivers it.
type fakeKVE struct {
	key   string
	value []byte
	rev   uint64
	op    jetstream.KeyValueOp
}

func (e fakeKVE) Bucket() string                  { return "tool_calls" }
func (e fakeKVE) Key() string                     { return e.key }
func (e fakeKVE) Value() []byte                   { return e.value }
func (e fakeKVE) Revision() uint64                { return e.rev }
func (e fakeKVE) Created() time.Time              { return time.Time{} }
func (e fakeKVE) Delta() uint64                   { return 0 }
func (e fakeKVE) Operation() jetstream.KeyValueOp { return e.op }

// BenchmarkCallIndexMemory measures what the index holds per call, in
// heap bytes after a GC (B/entry): a finished call's summary, and an
// open call's (summary and entry), for 100,000 calls of about 700 bytes
// of JSON each. It also reports the time to apply one message (ns/op).
//
//	go test -run '^$' -bench CallIndexMemory ./bus
func BenchmarkCallIndexMemory(b *testing.B) {
	const n = 100_000
	for _, status := range []machine.State{machine.StateCompletedSuccess, machine.StatePendingApproval} {
		b.Run(string(status), func(b *testing.B) {
			msgs := make([]fakeKVE, n)
			for i := range msgs {
				e := machine.Entry{
					PendingID: machine.PendingID(fmt.Sprintf("conv-%04d", i%5000), fmt.Sprintf("toolu_%012d", i)), ToolCallID: fmt.Sprintf("toolu_%012d", i),
					ToolName: "send_email", CallerBotID: fmt.Sprintf("agent-support-%d", i%7), ConversationID: fmt.Sprintf("conv-%04d", i%5000),
					ToolArguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed","body":"The export of 2026-11-24 failed at step 3 of 7."}`),
					RequestedAt:   int64(1_790_000_000_000 + i*10), Status: status, Team: "support", EstimatedCost: 0.002,
					ApprovedOrRejectedByUserID: "reviewer-7", Result: json.RawMessage(`{"messageId":"<20261124.1234@example.com>","accepted":true}`),
					LastTransition: &machine.Transition{Event: machine.EventSucceed, From: machine.StateExecuting, To: status, Actor: "executor-1", At: 1_790_000_000_000, Write: "0123456789abcdef"},
				}
				data, _ := json.Marshal(e)
				msgs[i] = fakeKVE{key: e.PendingID, value: data, rev: uint64(i + 1), op: jetstream.KeyValuePut}
			}
			log := slog.New(slog.DiscardHandler)
			var perEntry float64
			for b.Loop() {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				st := &indexState{byID: map[string]*callSummary{}, strs: map[string]string{}, loading: true}
				for _, m := range msgs {
					st.apply(callRevision(m), log)
				}
				st.loaded()
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				// The keys are the messages' strings, and an open call's
				// value its JSON, which the watch allocates per message
				// and the index keeps: count them.
				keys := 0
				for _, m := range msgs {
					keys += len(m.key)
					if !status.Terminal() {
						keys += len(m.value)
					}
				}
				perEntry = (float64(after.HeapAlloc) - float64(before.HeapAlloc) + float64(keys)) / n
				runtime.KeepAlive(st)
				b.StartTimer()
			}
			b.ReportMetric(perEntry, "B/entry")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/apply")
		})
	}
}

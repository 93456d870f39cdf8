package views

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
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
				st := newIndexState(true)
				for _, m := range msgs {
					st.apply(callRevision(m), log)
				}
				st.loaded()
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				// An open call's value is its JSON, which the watch
				// allocates per message and the index keeps: count it.
				// (The keys are counted: the feed copies them.)
				kept := 0
				for _, m := range msgs {
					if !status.Terminal() {
						kept += len(m.value)
					}
				}
				perEntry = (float64(after.HeapAlloc) - float64(before.HeapAlloc) + float64(kept)) / n
				runtime.KeepAlive(st)
				b.StartTimer()
			}
			b.ReportMetric(perEntry, "B/entry")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/apply")
		})
	}
}

// The index holds the JSON of the open calls written last, at most
// maxOpenJSON bytes of it however many calls are open, and no more
// references to it than twice the calls that hold some, however often
// they are written.
func TestCallIndex_HoldsTheJSONOfTheOpenCallsWrittenLast(t *testing.T) {
	t.Parallel()
	st := newIndexState(false)
	log := slog.New(slog.DiscardHandler)
	pad := strings.Repeat("x", 60<<10)
	write := func(rev uint64, id string, status machine.State, description string) {
		data, err := json.Marshal(machine.Entry{PendingID: id, Status: status, RequestedAt: int64(rev), Description: description})
		if err != nil {
			t.Fatal(err)
		}
		st.apply(callRevision(fakeKVE{key: id, value: data, rev: rev, op: jetstream.KeyValuePut}), log)
	}
	put := func(rev uint64, id string, status machine.State) { write(rev, id, status, pad) }
	const n = 400 // 24 MiB of open calls' JSON, over maxOpenJSON
	for i := range n {
		put(uint64(i+1), fmt.Sprintf("c.%04d", i), machine.StatePendingApproval)
	}
	if st.openBytes > maxOpenJSON || st.openBytes < maxOpenJSON-(64<<10) {
		t.Fatalf("holds %d bytes of JSON, want at most and about %d", st.openBytes, maxOpenJSON)
	}
	holds := func(id string) bool { slot, ok := st.byID.find(st.calls, id); return ok && st.calls[slot].hasOpen }
	if holds("c.0000") || !holds(fmt.Sprintf("c.%04d", n-1)) {
		t.Fatal("the JSON held is not that of the calls written last")
	}
	if st.byID.Len() != n {
		t.Fatalf("summaries: %d, want %d", st.byID.Len(), n)
	}

	// One call written again and again (small, as a heartbeat is: the
	// size is not what this counts), then finished: the references stay
	// few, and its JSON goes.
	last := fmt.Sprintf("c.%04d", n-1)
	for rev := uint64(n + 1); rev < n+20_000; rev++ {
		write(rev, last, machine.StateExecuting, "")
	}
	if len(st.openQueue) > max(1024, 2*len(st.open))+1 {
		t.Fatalf("%d references for %d calls holding JSON", len(st.openQueue), len(st.open))
	}
	before := st.openBytes
	put(n+20_000, last, machine.StateCompletedSuccess)
	if holds(last) || st.openBytes >= before {
		t.Fatalf("a finished call's JSON is kept (%d bytes held, %d before)", st.openBytes, before)
	}
}

package views_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
)

// A CallHead decodes what encoding/json decodes: names in another case,
// and an entry json/v2 refuses (invalid UTF-8, a name twice).
func TestDecodeCallHead_AsEncodingJSON(t *testing.T) {
	for _, data := range []string{
		`{"PENDINGID":"a.b","Status":"PENDING_APPROVAL","approvaltimeoutat":100,"toolArguments":{"x":[1,2,{"y":null}]}}`,
		"{\"pendingId\":\"a.b\",\"status\":\"PENDING_APPROVAL\",\"approvalTimeoutAt\":100,\"description\":\"\xff\"}",
		`{"pendingId":"a.b","status":"PENDING_APPROVAL","approvalTimeoutAt":50,"approvalTimeoutAt":100}`,
		`{"pendingId":"a.b","status":"EXECUTING","approvalTimeoutAt":100,"lease":{"holder":"x","expiresAt":7},"lastTransition":{"at":3,"event":"start"},"escalations":[{"at":5,"to":["bob"]}]}`,
	} {
		var want views.CallHead
		require.NoError(t, json.Unmarshal([]byte(data), &want))
		got, err := views.DecodeCallHead([]byte(data))
		require.NoError(t, err, data)
		assert.Equal(t, &want, got, data)
		assert.EqualValues(t, 100, got.ApprovalTimeoutAt, data)
	}
	_, err := views.DecodeCallHead([]byte(`{"pendingId":`))
	assert.Error(t, err)
}

// BenchmarkDecodeEntry decodes a running call's entry with three receipts
// (1.7 KB), with encoding/json and as the store and the relay do
// (jsio.DecodeEntry, json/v2): compare the two in one run.
func BenchmarkDecodeEntry(b *testing.B) {
	e := machine.Entry{PendingID: "conv-001.call-0000001", ToolCallID: "call-0000001", ToolName: "send_email",
		ToolArguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed","body":"The nightly export failed at 02:00 with exit code 3."}`),
		CallerBotID:   "agent-support-3", ConversationID: "conv-001", Team: "support", Status: machine.StateExecuting, RequestedAt: 1764000000000,
		ApprovalTimeoutAt: 1764000600000, ExecutionAttempts: 1, Lease: &machine.Lease{Holder: "executor-1", ExpiresAt: 1764000030000},
		LastTransition: &machine.Transition{Event: machine.EventStart, From: machine.StateApproved, To: machine.StateExecuting, Actor: "executor-1", At: 1764000000100}}
	for i := range 3 {
		e.Receipts = append(e.Receipts, machine.Receipt{Seq: i + 1, PendingID: e.PendingID, ToolName: e.ToolName, Caller: e.CallerBotID,
			Event: machine.EventAsk, To: machine.StatePendingApproval, Actor: "policy", At: 1764000000000,
			ArgumentsDigest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Prev: "0123456789abcdef0123456789abcdef",
			Key: "UABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRSTUVW", Sig: "c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl"})
	}
	data, err := json.Marshal(e)
	require.NoError(b, err)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e machine.Entry
			if err := json.Unmarshal(data, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeEntry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsio.DecodeEntry(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the calls feed reads of every revision, at start of every key.
	b.Run("callHead", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := views.DecodeCallHead(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Loaded is closed once every view has read what the bucket held, and
// not before.
func TestCallsFeed_LoadedOnceTheViewsHaveReadTheBucket(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	bustest.PutRaw(t, env.JS, 50, func(i int) (string, []byte) {
		id := machine.PendingID("conv", fmt.Sprintf("call-%02d", i))
		return id, fmt.Appendf(nil, `{"pendingId":%q,"status":"PENDING_APPROVAL"}`, id)
	})
	f := views.NewCallsFeed(env.JS, env.KV)
	var read atomic.Int64
	seen := make(chan int64, 1)
	f.Add(views.CallsView{Start: func() (func(views.CallRevision), func()) {
		loaded := func() {
			select {
			case seen <- read.Load():
			default: // a second life's
			}
		}
		return func(views.CallRevision) { read.Add(1) }, loaded
	}})
	select {
	case <-f.Loaded():
		t.Fatal("loaded before running")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, bustest.Logger()) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-f.Loaded():
	case <-time.After(30 * time.Second):
		t.Fatalf("not loaded within 30s; the view read %d", read.Load())
	}
	assert.EqualValues(t, 50, <-seen, "revisions the view had read when told the bucket was read")
}

// A life of the feed ends only once its views have applied every
// revision the watch handed over, however far behind they are: the feed
// does not stop while a view is still applying, Unsync comes after the
// life's last apply, and a view never sees two lives at once.
func TestCallsFeed_ALifeEndsAfterItsLastApply(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	const n = 100
	bustest.PutRaw(t, env.JS, n, func(i int) (string, []byte) {
		id := machine.PendingID("conv", fmt.Sprintf("call-%03d", i))
		return id, fmt.Appendf(nil, `{"pendingId":%q,"status":"PENDING_APPROVAL"}`, id)
	})
	// The view holds its first apply until released: the watch reads on
	// meanwhile.
	release := make(chan struct{})
	var mu sync.Mutex
	var notes []string // what the view was told, in order
	note := func(s string) {
		mu.Lock()
		notes = append(notes, s)
		mu.Unlock()
	}
	holding := make(chan struct{})
	first := true
	f := views.NewCallsFeed(env.JS, env.KV)
	f.Add(views.CallsView{
		Start: func() (func(views.CallRevision), func()) {
			note("start")
			return func(views.CallRevision) {
				if first {
					first = false
					close(holding)
					<-release
				}
				note("apply")
			}, func() { note("loaded") }
		},
		Unsync: func() { note("unsync") },
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, bustest.Logger()) }()
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the view was handed no revision")
	}
	cancel() // the life ends, its view still at its first revision
	select {
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the feed stopped while its view was still applying: %v", notes)
	case <-time.After(50 * time.Millisecond): // (a broken feed stops at once)
	}
	note("release")
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the feed did not stop")
	}

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "start", notes[0])
	end := slices.Index(notes, "unsync")
	require.Positive(t, end, "the life ended: %v", notes)
	assert.NotContains(t, notes[1:end], "start")
	assert.Less(t, slices.Index(notes, "release"), end, "Unsync while the view was held")
	assert.NotContains(t, notes[end+1:], "apply", "an apply after the life's Unsync")
	assert.Contains(t, notes[:end], "apply")
}

// BenchmarkCallsFeedLoad is the start-up read of tool_calls by a
// process's feed, apart from the rest of a restart (cmd/toolgate's
// BenchmarkServeRestart restarts a whole serve): open calls of about 1 KB
// with a receipt, read by a feed holding the call index and the timer's
// view as serve's does, against a bare kv.WatchAll of the same bucket
// (decoding nothing) in the same run. It reports both reads' ms and their
// ratio, feed-x. 100k calls; 10k with -short.
func BenchmarkCallsFeedLoad(b *testing.B) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	env := bustest.Start(b, bustest.Topologies[0])
	at := time.Now().UnixMilli()
	bustest.PutRaw(b, env.JS, n, func(i int) (string, []byte) {
		e := machine.Entry{
			ToolCallID: fmt.Sprintf("toolu_%012d", i), ConversationID: fmt.Sprintf("conv-%05d", i%5000), ToolName: "send_email",
			ToolArguments: json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed","body":"The export failed at step 3 of 7."}`),
			CallerBotID:   fmt.Sprintf("agent-%d", i%7), RequestedAt: at, Status: machine.StatePendingApproval,
			ApprovalTimeoutAt: at + 30*24*3_600_000, Team: "support",
		}
		e.PendingID = machine.PendingID(e.ConversationID, e.ToolCallID)
		e.LastTransition = &machine.Transition{Event: machine.EventAsk, To: e.Status, Actor: "policy", Reason: "email leaves the company", At: at}
		e.Receipts = []machine.Receipt{{Seq: 1, PendingID: e.PendingID, ToolName: e.ToolName, Caller: e.CallerBotID, Event: machine.EventAsk,
			To: e.Status, Actor: "policy", At: at, Key: "NBSB2QLMOBKIMKEWMOMFX2ZFB7MVGGQMVNY6XIXOAZ2NAP6MS3OWVHLW",
			Sig: "kq0CqZb2rJm0y1bHjV4Xb7l4Y5m0b1aWb4d6m9Qv8yq3pQ6xN2u7aF0cD8eJ1hK4lM5nO6pR7sT8uV9wX0yZ1A"}}
		data, err := json.Marshal(e)
		require.NoError(b, err)
		return e.PendingID, data
	})
	raw := func() time.Duration {
		start := time.Now()
		w, err := env.KV.WatchAll(b.Context())
		require.NoError(b, err)
		defer w.Stop() //nolint:errcheck // a read's end
		for kve := range w.Updates() {
			if kve == nil {
				return time.Since(start)
			}
		}
		b.Fatal("the watch ended")
		return 0
	}
	feed := func() time.Duration {
		var wg sync.WaitGroup
		defer wg.Wait()
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel() // before the wait
		start := time.Now()
		f, index := views.NewCallsFeed(env.JS, env.KV), views.NewCallIndex(env.JS, env.KV)
		timer := worker.NewTimer(env.Conn, env.Buckets, machine.New(env.Store), bustest.Logger(), worker.WithFeed(f))
		f.Add(index.View(bustest.Logger()))
		wg.Go(func() { _ = timer.Run(ctx) })
		wg.Go(func() { _ = f.Run(ctx, bustest.Logger()) })
		select {
		case <-f.Loaded():
		case <-time.After(5 * time.Minute):
			b.Fatal("the feed did not read the bucket within 5 minutes")
		}
		return time.Since(start)
	}
	var rawD, feedD time.Duration
	b.ResetTimer()
	for range b.N {
		rawD += raw()
		feedD += feed()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(feedD), "feed-ms")
	b.ReportMetric(ms(rawD), "raw-ms")
	b.ReportMetric(float64(feedD)/float64(rawD), "feed-x")
}

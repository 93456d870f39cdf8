package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkList measures listing across conversations (what `toolgate
// pending` and `list`, GET /v1/tool-calls and the inbox do) in a bucket of
// 1,000 pending calls beside 10,000 and 100,000 finished ones: from the
// index (a Service that follows the bucket) and by the scan of the whole
// bucket (one that does not, as every list did before the index).
//
//   - page: one page of PENDING_APPROVAL, limit 200 (an API list page);
//   - pending: every page of PENDING_APPROVAL, cursor to cursor (the
//     whole `toolgate pending`);
//   - page-finished: one page of COMPLETED_SUCCESS, limit 200, each entry
//     read from the bucket by the index (a page of `toolgate list`).
//
// Each reports ns/op and "gets", its time over that of one raw kv.Get of
// an entry measured in the same run, before and after it (the baseline:
// the cheapest request a list could make; the median of 201 Gets each
// time). The fixture is written into
// the bucket directly, in parallel, outside the timer; the 100k case
// takes a while to write and runs only with -bench, and not with -short.
//
//	go test -run '^$' -bench 'List$' -benchtime 20x ./gate
func BenchmarkList(b *testing.B) {
	for _, finished := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("finished=%dk", finished/1000), func(b *testing.B) {
			if finished > 10_000 && testing.Short() {
				b.Skip("-short")
			}
			benchList(b, 1000, finished)
		})
	}
}

func benchList(b *testing.B, pending, finished int) {
	env := bustest.Start(b, bustest.Topologies[0])
	ids := writeListFixture(b, env.JS, pending, finished)
	indexed := New(Config{Conn: env.Conn, Buckets: env.Buckets})
	scanned := New(Config{Conn: env.Conn, Buckets: env.Buckets}) // never follows: the scan
	start := time.Now()
	bustest.FollowCalls(b, indexed.index)
	b.Logf("%d entries: index synced in %v", pending+finished, time.Since(start))

	ctx := context.Background()
	rng := rand.New(rand.NewPCG(2, 13))
	// get is the median time of a raw kv.Get of an entry, over 201: a
	// GC pause (the scan makes a lot of garbage) moves it little.
	get := func() time.Duration {
		times := make([]time.Duration, 201)
		for i := range times {
			t0 := time.Now()
			if _, err := env.KV.Get(ctx, ids[rng.IntN(len(ids))]); err != nil {
				b.Fatal(err)
			}
			times[i] = time.Since(t0)
		}
		slices.Sort(times)
		return times[len(times)/2]
	}
	list := func(s *Service, status machine.State, all bool) func() {
		return func() {
			r := wire.ListRequest{Status: status, Limit: 200}
			got := 0
			for {
				page, err := s.List(ctx, System, r)
				if err != nil {
					b.Fatal(err)
				}
				got += len(page.Items)
				if r.Cursor = page.NextCursor; !all || r.Cursor == "" {
					break
				}
			}
			if want := min(pending, 200); !all && status == machine.StatePendingApproval && got != want {
				b.Fatalf("listed %d, want %d", got, want)
			}
			if all && got != pending {
				b.Fatalf("listed %d, want %d", got, pending)
			}
		}
	}
	for _, c := range []struct {
		name string
		op   func()
	}{
		{"page/index", list(indexed, machine.StatePendingApproval, false)},
		{"page/scan", list(scanned, machine.StatePendingApproval, false)},
		{"pending/index", list(indexed, machine.StatePendingApproval, true)},
		{"pending/scan", list(scanned, machine.StatePendingApproval, true)},
		{"page-finished/index", list(indexed, machine.StateCompletedSuccess, false)},
		{"page-finished/scan", list(scanned, machine.StateCompletedSuccess, false)},
	} {
		b.Run(c.name, func(b *testing.B) {
			runtime.GC()
			before := get()
			b.ResetTimer()
			for b.Loop() {
				c.op()
			}
			b.StopTimer()
			perOp := b.Elapsed() / time.Duration(b.N)
			baseline := (before + get()) / 2
			b.ReportMetric(float64(baseline.Nanoseconds()), "get-ns")
			b.ReportMetric(float64(perOp)/float64(baseline), "gets")
			b.ReportMetric(float64(perOp.Microseconds())/1000, "ms")
		})
	}
}

// writeListFixture writes pending open calls and finished ones (about 700
// bytes of JSON each, requestedAt spread so that the open calls are
// interleaved with the finished) straight into the bucket's stream, in
// parallel, and returns the open calls' ids.
func writeListFixture(b *testing.B, js jetstream.JetStream, pending, finished int) []string {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	var ids []string
	bustest.PutRaw(b, js, pending+finished, func(i int) (string, []byte) {
		open := i%((pending+finished)/pending) == 0 && len(ids) < pending
		at := now - int64(pending+finished-i)*10
		e := machine.Entry{
			PendingID:         machine.PendingID(fmt.Sprintf("conv-%04d", i%5000), fmt.Sprintf("toolu_%012d", i)),
			ToolName:          "send_email",
			ToolArguments:     json.RawMessage(`{"to":"ops@example.com","subject":"Nightly export failed","body":"The export of 2026-11-24 failed at step 3 of 7."}`),
			CallerBotID:       fmt.Sprintf("agent-support-%d", i%7),
			RequestedAt:       at,
			Team:              "support",
			EstimatedCost:     0.002,
			ApprovalTimeoutAt: at + 3_600_000,
		}
		e.ToolCallID = fmt.Sprintf("toolu_%012d", i)
		e.ConversationID = fmt.Sprintf("conv-%04d", i%5000)
		e.ArgumentsDigest = machine.ArgumentsDigest(e.ToolArguments)
		if open {
			e.Status = machine.StatePendingApproval
			e.LastTransition = &machine.Transition{Event: machine.EventAsk, To: e.Status, Actor: "policy", Reason: "email leaves the company", At: at, Write: "0123456789abcdef"}
			ids = append(ids, e.PendingID)
		} else {
			e.Status = machine.StateCompletedSuccess
			e.ApprovedOrRejectedByUserID, e.DecisionTime, e.DecisionScope = "reviewer-7", at+5000, machine.ScopeOnce
			e.ExecutionAttempts, e.LastAttemptTime = 1, at+6000
			e.Result = json.RawMessage(`{"messageId":"<20261124.1234@example.com>","accepted":true}`)
			e.LastTransition = &machine.Transition{Event: machine.EventSucceed, From: machine.StateExecuting, To: e.Status, Actor: "executor-1", At: at + 7000, Write: "0123456789abcdef"}
		}
		data, err := json.Marshal(e)
		require.NoError(b, err)
		return e.PendingID, data
	})
	require.Len(b, ids, pending)
	stream, err := js.Stream(ctx, "KV_"+wire.CallsBucket)
	require.NoError(b, err)
	info, err := stream.Info(ctx)
	require.NoError(b, err)
	require.EqualValues(b, pending+finished, info.State.Msgs, "every entry written")
	return ids
}

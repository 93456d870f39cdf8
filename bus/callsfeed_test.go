package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/bus/bustest"
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
		var want bus.CallHead
		require.NoError(t, json.Unmarshal([]byte(data), &want))
		got, err := bus.DecodeCallHead([]byte(data))
		require.NoError(t, err, data)
		assert.Equal(t, &want, got, data)
		assert.EqualValues(t, 100, got.ApprovalTimeoutAt, data)
	}
	_, err := bus.DecodeCallHead([]byte(`{"pendingId":`))
	assert.Error(t, err)
}

// BenchmarkDecodeEntry decodes a running call's entry with three receipts
// (1.7 KB), with encoding/json and as the store and the relay do
// (decodeEntry, json/v2): compare the two in one run.
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
	b.Run("decodeEntry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.DecodeEntry(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// An entry decodes as encoding/json decodes it, every field set or
// absent, null where it may be, names in another case, and what json/v2
// refuses (invalid UTF-8, a name twice).
func TestDecodeEntry_AsEncodingJSON(t *testing.T) {
	full := machine.Entry{
		PendingID: "conv-1.call-1", ToolCallID: "call-1", ToolName: "send_email",
		ToolArguments: json.RawMessage(`{ "to" : "ops@example.com", "n": [1, 2.5e3, null] }`), OriginalArguments: json.RawMessage(`{"to":"x"}`),
		ArgumentsDigest: "sha256:ab", PolicyRevision: 7, Risk: machine.RiskHigh, CallerBotID: "agent", ConversationID: "conv-1", RequestedAt: 1,
		Status: machine.StateExecuting, StatusReason: "why", ExecutionAttempts: 2, LastAttemptTime: 3, ScheduledExecutionTime: 4,
		ApprovalTimeoutAt: 5, ReminderAt: 6, Reminded: true, Overdue: true, AutoRejectOnTimeout: true, UserIDToApprove: "ann",
		Approvers: []string{"ann", "bob"}, Quorum: &machine.Quorum{Required: 2, Of: []string{"ann", "bob"}},
		Votes: []machine.Vote{{By: "ann", Approve: true, At: 8, Reason: "ok"}}, Escalations: []machine.Escalation{{At: 9, To: []string{"cto"}}},
		Escalated: 1, ApprovedOrRejectedByUserID: "ann", DecisionTime: 10, DecisionScope: machine.ScopeTask,
		Result: json.RawMessage(`{"sent":true}`), Error: "boom", Cost: 0.25, Team: "support", TaskID: "t", EstimatedCost: 0.5,
		PermissionMode: "default", Description: "mail \u00e9\u2028<&>", MaxExecutionAttempts: 3, CostReserved: 0.5, CostDay: "2026-11-24",
		Lease:          &machine.Lease{Holder: "x", ExpiresAt: 11},
		Receipts:       []machine.Receipt{{Seq: 1, PendingID: "conv-1.call-1", Event: machine.EventAsk, To: machine.StatePendingApproval, Actor: "policy", At: 1, Key: "U", Sig: "s"}},
		LastTransition: &machine.Transition{Event: machine.EventStart, From: machine.StateApproved, To: machine.StateExecuting, Actor: "x", At: 12},
	}
	data, err := json.Marshal(full)
	require.NoError(t, err)
	for _, data := range []string{
		string(data),
		`{"pendingId":"a.b","status":"PENDING_APPROVAL","toolArguments":null,"result":null,"lease":null,"receipts":null,"approvers":null}`,
		`{"PENDINGID":"a.b","Status":"PENDING_APPROVAL","toolarguments":{"x":1},"LastTransition":{"Event":"ask","AT":3}}`,
		"{\"pendingId\":\"a.b\",\"status\":\"PENDING_APPROVAL\",\"description\":\"\xff\"}",
		`{"pendingId":"a.b","status":"PENDING_APPROVAL","approvalTimeoutAt":50,"approvalTimeoutAt":100}`,
		`{"pendingId":"a.b","unknown":{"deep":[1,{"x":null}]},"cost":1e-3}`,
	} {
		var want machine.Entry
		require.NoError(t, json.Unmarshal([]byte(data), &want))
		got, err := bus.DecodeEntry([]byte(data))
		require.NoError(t, err, data)
		assert.Equal(t, &want, got, data)
	}
	_, err = bus.DecodeEntry([]byte(`{"pendingId":`))
	assert.Error(t, err)
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
	f := bus.NewCallsFeed(env.KV)
	var read atomic.Int64
	seen := make(chan int64, 1)
	f.Add(bus.CallsView{Start: func() (func(bus.CallRevision), func()) {
		loaded := func() {
			select {
			case seen <- read.Load():
			default: // a second life's
			}
		}
		return func(bus.CallRevision) { read.Add(1) }, loaded
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

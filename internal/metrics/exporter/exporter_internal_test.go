package exporter

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/wire"
)

// The exporter decodes of an event only its head (wire.EventHead):
// every kind of event, observed from that, counts what the whole event
// counts.
func TestObserved_HoldsWhatObserveReads(t *testing.T) {
	entry := func(to machine.State) *machine.Entry {
		return &machine.Entry{PendingID: "c.1", ToolName: "deploy", Team: "ops", Status: to, RequestedAt: 1_000, DecisionTime: 4_500,
			LastAttemptTime: 6_000, Cost: 0.25, ToolArguments: json.RawMessage(`{"to":"prod"}`), Result: json.RawMessage(`"ok"`),
			Receipts: []machine.Receipt{{Seq: 1}}}
	}
	var events []*wire.Event
	for _, tr := range []struct {
		ev       machine.Event
		from, to machine.State
	}{
		{machine.EventAsk, "", machine.StatePendingApproval},
		{machine.EventApprove, machine.StatePendingApproval, machine.StateApproved},
		{machine.EventReject, machine.StatePendingApproval, machine.StateRejectedByUser},
		{machine.EventTimeout, machine.StatePendingApproval, machine.StateRejectedByTimeout},
		{machine.EventOverdue, machine.StatePendingApproval, machine.StatePendingApproval},
		{machine.EventStart, machine.StateApproved, machine.StateExecuting},
		{machine.EventSucceed, machine.StateExecuting, machine.StateCompletedSuccess},
		{machine.EventFail, machine.StateExecuting, machine.StateCompletedFailure},
		{machine.EventDeny, "", machine.StateRejectedByPolicy},
	} {
		events = append(events, &wire.Event{V: wire.EventVersion, Event: tr.ev, From: tr.from, To: tr.to, At: 7_000, Actor: "x", Entry: entry(tr.to)})
	}
	whole, slim := prometheus.NewRegistry(), prometheus.NewRegistry()
	mWhole, err := metrics.For(whole)
	require.NoError(t, err)
	mSlim, err := metrics.For(slim)
	require.NoError(t, err)
	for _, ev := range events {
		mWhole.Observe(ev)
		data, err := json.Marshal(ev)
		require.NoError(t, err)
		head, err := wire.DecodeEventHead(data)
		require.NoError(t, err)
		mSlim.Observe(observed(head))
	}
	for _, name := range []string{metrics.NameTransitions, metrics.NameToolCalls, metrics.NameApprovalResponse, metrics.NameApprovalTimeouts, metrics.NameExecution, metrics.NameExecutionAttempts, metrics.NameCost} {
		want, err := testutil.CollectAndFormat(whole, expfmt.TypeTextPlain, name)
		require.NoError(t, err)
		got, err := testutil.CollectAndFormat(slim, expfmt.TypeTextPlain, name)
		require.NoError(t, err)
		require.NotEmpty(t, want, name)
		require.Equal(t, string(want), string(got), name)
	}
}

package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// Outcomes of a scripted call.
const (
	outcomeApprove = "approve"
	outcomeReject  = "reject"
	outcomeTimeout = "timeout"
)

// scripted is one call of a scripted history and what becomes of it.
type scripted struct {
	call    machine.Call
	at      time.Time     // asked
	after   time.Duration // answered (or timed out) this long after
	outcome string
	by      string // the approver who decides
	reason  string
	cost    float64 // an approved call is run, and reports this cost
}

func (s scripted) decidedAt() time.Time { return s.at.Add(s.after) }

var approverTokens = map[string]string{"alice": aliceToken, "bob": bobToken, "carol": "carol-token-000000001"}

// play makes a scripted history happen through the API, each step at its
// time on clk: the admin submits, approvers decide, the timeout rejects
// as the timer would, and an executor runs what was approved.
func (in *inboxServer) play(clk *toolgatetest.Clock, calls []scripted) {
	t := in.t
	t.Helper()
	ctx := t.Context()
	for _, s := range calls {
		clk.Set(s.at)
		var e machine.Entry
		status := in.do("POST", "/v1/tool-calls", adminToken, s.call, &e)
		// The API answers a retry with 200, and tells one by a request
		// time before the request's: a clock in the past looks like one.
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, status, "submit %s", s.call.ToolCallID)
		require.Equal(t, machine.StatePendingApproval, e.Status, "the policy asks about %s", s.call.ToolName)
		clk.Set(s.decidedAt())
		switch s.outcome {
		case outcomeApprove, outcomeReject:
			token, ok := approverTokens[s.by]
			require.True(t, ok, "no token for approver %q", s.by)
			require.Equal(t, http.StatusOK, in.do("POST", "/v1/tool-calls/"+e.PendingID+"/decision", token,
				wire.DecideRequest{Approved: s.outcome == outcomeApprove, Reason: s.reason}, nil), "decide %s", e.PendingID)
		case outcomeTimeout:
			got, err := in.gate.Timer().Expire(ctx, e.PendingID)
			require.NoError(t, err)
			require.Equal(t, machine.StateRejectedByTimeout, got.Status, "the policy rejects %s on timeout", s.call.ToolName)
		default:
			t.Fatalf("outcome %q of %s", s.outcome, s.call.ToolCallID)
		}
		if s.outcome == outcomeApprove && s.cost > 0 {
			_, err := in.gate.ClaimAt(ctx, gate.System, wire.ReportRequest{PendingID: e.PendingID, By: "executor-1", LeaseMs: time.Minute.Milliseconds()})
			require.NoError(t, err)
			clk.Set(s.decidedAt().Add(3 * time.Second))
			_, err = in.gate.Complete(ctx, gate.System, wire.ReportRequest{PendingID: e.PendingID, By: "executor-1", Cost: s.cost})
			require.NoError(t, err)
		}
	}
}

// analytics waits until /v1/analytics has counted every event and done
// says it holds what the test played, and returns it.
func (in *inboxServer) analytics(done func(r *wire.AnalyticsReport) bool) *wire.AnalyticsReport {
	t := in.t
	t.Helper()
	var r *wire.AnalyticsReport
	// Not in.do: an error is what the wait last saw, not the test's end.
	get := func() (*wire.AnalyticsReport, error) {
		req, err := http.NewRequestWithContext(t.Context(), "GET", in.url+"/v1/analytics", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+viewerToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /v1/analytics: %s", resp.Status)
		}
		var got wire.AnalyticsReport
		return &got, json.NewDecoder(resp.Body).Decode(&got)
	}
	bustest.Eventually(t, 20*time.Second, 20*time.Millisecond, "the analytics counted the scripted history", func() (bool, any) {
		got, err := get()
		if err != nil {
			return false, err
		}
		r = got
		return got.Lag == 0 && done(got), fmt.Sprintf("the report: lag %d, totals %+v", got.Lag, got.Totals)
	})
	return r
}

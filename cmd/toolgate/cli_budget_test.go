package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The regression that motivated settling budgets from events: a call an
// executor runs (through the request API, as every executor now does)
// whose estimate was 3 and whose run cost 2 leaves the team's ledger at
// reserved 0, spent 2 — as `toolgate budget` and GET /v1/budgets show.
func TestBudget_ExecutorRunCallSettlesAndShows(t *testing.T) {
	t.Parallel()
	url, base := startWithHTTP(t, "default: {requiresApprovalTools: none, dailyCostLimit: 10}\n")

	x, err := agent(t, url).NewExecutor(client.ExecutorOptions{Lease: 5 * time.Second})
	require.NoError(t, err)
	x.Handle("report", func(context.Context, client.Call) (client.Result, error) {
		return client.Result{Output: json.RawMessage(`{"pages":4}`), Cost: 2}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- x.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	out, err := agent(t, url).Request(t.Context(), machine.Call{
		ToolCallID: "r1", ToolName: "report", CallerBotID: "bot", ConversationID: "budget", Team: "research", EstimatedCost: 3,
	}, client.UntilFinished())
	require.NoError(t, err)
	require.Equal(t, client.Executed, out.Kind)
	day := out.Entry.CostDay
	require.NotEmpty(t, day, "the call reserved on a day")

	want := wire.Budget{Team: "research", Day: day, Limit: new(10.0), Reserved: 0, Spent: 2}
	var got []wire.Budget
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the ledger: research spent 2", func() (bool, any) {
		r := cli(t, url, "budget", "--team", "research", "--json")
		if r.code != 0 {
			return false, fmt.Sprintf("exit %d: %s", r.code, r.stderr)
		}
		got = nil
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			return false, fmt.Sprintf("%v: %s", err, r.stdout)
		}
		return reflect.DeepEqual(got, []wire.Budget{want}), fmt.Sprintf("%+v", got)
	})

	r := cli(t, url, "budget")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `research\s+`+day+`\s+0\s+2\s+10`, r.stdout)

	resp, err := http.Get(base + "/v1/budgets?team=research")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var reply wire.BudgetsReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
	assert.Equal(t, []wire.Budget{want}, reply.Items)

	r = cli(t, url, "budget", "--team", "nobody", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `[]`, r.stdout, "a team with no spending has no days")
}

// TestBudget_CentsAddUpExactly: thirteen calls that cost 0.01 each have
// spent 0.13 of a daily limit of 0.13, as `toolgate budget` prints and its
// JSON says, and leave no room for a fourteenth.
func TestBudget_CentsAddUpExactly(t *testing.T) {
	t.Parallel()
	url, _ := startWithHTTP(t, "default: {requiresApprovalTools: none, dailyCostLimit: 0.13}\n")
	x, err := agent(t, url).NewExecutor(client.ExecutorOptions{Lease: 5 * time.Second})
	require.NoError(t, err)
	x.Handle("report", func(context.Context, client.Call) (client.Result, error) {
		return client.Result{Output: json.RawMessage(`{}`), Cost: 0.01}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- x.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	var day string
	for i := range 13 {
		out, err := agent(t, url).Request(t.Context(), machine.Call{
			ToolCallID: fmt.Sprint("cent-", i), ToolName: "report", CallerBotID: "bot", ConversationID: "cents", Team: "ops", EstimatedCost: 0.01,
		}, client.UntilFinished())
		require.NoError(t, err)
		require.Equal(t, client.Executed, out.Kind, "call %d", i)
		day = out.Entry.CostDay
	}
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the ledger at reserved 0, spent 0.13", func() (bool, any) {
		r := cli(t, url, "budget", "--team", "ops", "--json")
		return strings.Contains(r.stdout, `"reserved": 0,`) && strings.Contains(r.stdout, `"spent": 0.13`+"\n"), r.stdout
	})
	r := cli(t, url, "budget", "--team", "ops")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^ops\s+`+day+`\s+0\s+0\.13\s+0\.13$`, r.stdout)

	e, err := agent(t, url).Submit(t.Context(), machine.Call{
		ToolCallID: "cent-13", ToolName: "report", CallerBotID: "bot", ConversationID: "cents", Team: "ops", EstimatedCost: 0.01,
	})
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, e.Status, "no room for a fourteenth: %s", e.StatusReason)
	assert.Contains(t, e.StatusReason, "no room for 0.01 more")
}

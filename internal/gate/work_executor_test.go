package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// startDeployer runs a client.Executor of deploy with slots free slots
// and lease against a toolgate that asks about every call; its handler
// runs until the test ends.
func startDeployer(t *testing.T, slots int, lease time.Duration) *toolgatetest.Gate {
	return startDeployerWith(t, slots, lease, "default: {requiresApprovalTools: all}\n")
}

// startDeployerWith is startDeployer under the policy doc.
func startDeployerWith(t *testing.T, slots int, lease time.Duration, doc string) *toolgatetest.Gate {
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: doc})
	_, ex := g.ConnectAs(t, "executor")
	x, err := ex.NewExecutor(client.ExecutorOptions{Concurrency: slots, Lease: lease})
	require.NoError(t, err)
	release := make(chan struct{})
	x.Handle("deploy", func(ctx context.Context, _ client.Call) (client.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return client.Result{Output: json.RawMessage(`true`)}, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = x.Run(ctx) })
	t.Cleanup(func() { close(release); cancel(); wg.Wait() })
	return g
}

// waitingRequests waits until exactly want requests for work of deploy
// wait at g.
func waitingRequests(t *testing.T, g *toolgatetest.Gate, want int) {
	t.Helper()
	bustest.Eventually(t, 10*time.Second, time.Millisecond, fmt.Sprintf("%d requests for work of deploy waiting", want), func() (bool, any) {
		n := waiting(g.Service, "deploy")
		return n == want, fmt.Sprintf("%d waiting", n)
	})
}

// approve submits a call of deploy and approves it, and says whether the
// approval claimed it for a request that waited, in its own write.
func approve(t *testing.T, g *toolgatetest.Gate, id string) bool {
	t.Helper()
	e, err := g.Client.Submit(t.Context(), machine.Call{ToolCallID: id, ToolName: "deploy", CallerBotID: "agent", ConversationID: "c1"})
	require.NoError(t, err)
	decided, err := g.Service.Decide(t.Context(), gate.System, wire.DecideRequest{PendingID: e.PendingID, Approved: true, By: "alice"})
	require.NoError(t, err)
	return decided.Status == machine.StateExecuting
}

// TestTakeWork_AnExecutorWaitsWithARequestForEachFreeSlot: an executor
// with free slots keeps a request for work waiting at toolgate for each
// (one call each), so that as many approvals made one after another
// each find one to claim their call for in their own write; a request
// asking for every free slot would leave one waiting, and the approvals
// after the first would go through the work queue.
func TestTakeWork_AnExecutorWaitsWithARequestForEachFreeSlot(t *testing.T) {
	t.Parallel()
	const slots = 3
	g := startDeployer(t, slots, 0)
	waitingRequests(t, g, slots)
	for i := range slots {
		require.True(t, approve(t, g, fmt.Sprint("slot-", i)), "approval %d claimed its call in its own write", i+1)
	}
}

// TestTakeWork_AnIdleExecutorKeepsOneRequestWaiting: requests answered
// with no call (their wait over) are not sent again while another
// waits, so an idle executor asks once a wait, not once for each slot;
// a call taken brings them back, one for each free slot.
func TestTakeWork_AnIdleExecutorKeepsOneRequestWaiting(t *testing.T) {
	t.Parallel()
	const slots = 3
	g := startDeployer(t, slots, 6*time.Second) // a wait of 2s
	waitingRequests(t, g, slots)
	// One left for half a second: the others' waits are over, and so was
	// the last one's if the one waiting is the one sent after it, which
	// waits 2s more. (Seen at the moment one is left, the last of the
	// first three may be about to end too; an approval then would find
	// none waiting.)
	var since time.Time
	bustest.Eventually(t, 10*time.Second, time.Millisecond, "one request for work of deploy waiting for half a second", func() (bool, any) {
		n := waiting(g.Service, "deploy")
		switch {
		case n != 1:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		return n == 1 && time.Since(since) >= 500*time.Millisecond, fmt.Sprintf("%d waiting", n)
	})
	require.True(t, approve(t, g, "after-idle"), "claimed for the request that waited")
	waitingRequests(t, g, slots-1) // one slot runs the call
}

// TestDecide_AGrantIsRecordedWhenTheApprovalStartsTheRun: an approval
// for the session that hands its call to a waiting executor in the same
// write records its grant all the same, whichever way it is made, and
// the next like call of the conversation runs without asking.
func TestDecide_AGrantIsRecordedWhenTheApprovalStartsTheRun(t *testing.T) {
	t.Parallel()
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	g := startDeployerWith(t, 4, 0, fmt.Sprintf(`default:
  requiresApprovalTools: all
  notify: [{type: slack, url: "http://127.0.0.1:9/none", signingSecret: %q, slackUsers: {U0ALICE: alice}}]
`, secret))
	paths := map[string]func(pendingID string) (*machine.Entry, error){
		"decide": func(id string) (*machine.Entry, error) {
			return g.Service.Decide(t.Context(), gate.System, wire.DecideRequest{PendingID: id, Approved: true, By: "alice", Scope: machine.ScopeSession})
		},
		"slack": func(id string) (*machine.Entry, error) {
			p, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]string{"id": "U0ALICE"},
				"actions": []map[string]string{{"action_id": gate.SlackActionApproveSession, "value": id}}})
			body := []byte(url.Values{"payload": {string(p)}}.Encode())
			ts := fmt.Sprint(time.Now().Unix())
			out, err := g.Service.Slack().Interaction(t.Context(), gate.SlackRequest{Body: body, Timestamp: ts, Signature: gate.SignSlack(secret, ts, body)})
			return out.Decided, err
		},
	}
	for path, approve := range paths {
		// Each path's two runs hold a slot each until the test ends.
		bustest.Eventually(t, 10*time.Second, time.Millisecond, "a request for work of deploy waiting", func() (bool, any) {
			n := waiting(g.Service, "deploy")
			return n > 0, fmt.Sprintf("%d waiting", n)
		})
		ctx, conv := t.Context(), "conv-"+path
		first, err := g.Client.Submit(ctx, machine.Call{ToolCallID: path + "-1", ToolName: "deploy", CallerBotID: "agent", ConversationID: conv})
		require.NoError(t, err)
		decided, err := approve(first.PendingID)
		require.NoError(t, err, path)
		require.Equal(t, machine.StateExecuting, decided.Status, "%s: the approval started the run in its own write", path)

		grants, err := g.Service.Grants(ctx, gate.System, wire.GrantsRequest{ConversationID: conv})
		require.NoError(t, err)
		require.Len(t, grants, 1, "%s: the session grant is recorded", path)
		require.Equal(t, wire.Grant{ID: grants[0].ID, Pattern: "deploy", ConversationID: conv, By: "alice", At: grants[0].At, PendingID: first.PendingID}, grants[0], path)

		next, err := g.Client.Submit(ctx, machine.Call{ToolCallID: path + "-2", ToolName: "deploy", CallerBotID: "agent", ConversationID: conv})
		require.NoError(t, err)
		require.NotEqual(t, machine.StatePendingApproval, next.Status, "%s: the grant lets the like call run without asking", path)
	}
}

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestEvents_ToolSubjectsCarryOnlyEvents: `nats sub 'tool.>'` while one
// call is asked about, approved, run and finished, with a webhook told of
// it, shows exactly that call's events, each the contract's envelope; the
// work item and the notifications travel under toolgate.
func TestEvents_ToolSubjectsCarryOnlyEvents(t *testing.T) {
	t.Parallel()
	told := make(chan string, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		told <- r.Header.Get("X-Toolgate-Event")
	}))
	t.Cleanup(hook.Close)
	g := toolgatetest.Start(t, toolgatetest.Options{Policy: fmt.Sprintf(
		"default:\n  requiresApprovalTools: [deploy]\n  notify: [{type: webhook, url: %q, secret: s3cr3t}]\n", hook.URL)})
	ctx := t.Context()

	// toolgate's own connection hears every subject.
	sub, err := g.NC.SubscribeSync("tool.>")
	require.NoError(t, err)
	require.NoError(t, g.NC.Flush())
	x, err := g.Client.NewExecutor(client.ExecutorOptions{ID: "events"})
	require.NoError(t, err)
	x.Handle("deploy", func(context.Context, client.Call) (client.Result, error) {
		return client.Result{Output: json.RawMessage(`"ok"`)}, nil
	})
	xctx, stop := context.WithCancel(ctx)
	xdone := make(chan error, 1)
	go func() { xdone <- x.Run(xctx) }()
	t.Cleanup(func() { stop(); <-xdone })

	e, err := g.Client.Submit(ctx, machine.Call{ToolCallID: "one", ToolName: "deploy", CallerBotID: "bot", ConversationID: "events"})
	require.NoError(t, err)
	_, err = g.Client.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true, Reason: "ship it"})
	require.NoError(t, err)
	_, err = g.Client.Await(ctx, e.PendingID, client.UntilFinished())
	require.NoError(t, err)
	// The notifications went through toolgate's queue: the webhook was
	// told of both (in either order: deliveries run side by side).
	var notified []string
	for len(notified) < 2 {
		select {
		case got := <-told:
			notified = append(notified, got)
		case <-time.After(30 * time.Second):
			t.Fatalf("the webhook was told only of %v", notified)
		}
	}
	assert.ElementsMatch(t, []string{wire.SubjectApprovalRequired, wire.SubjectApprovalGranted}, notified)

	want := []string{wire.SubjectApprovalRequired, wire.SubjectApprovalGranted, wire.SubjectExecutionStarted, wire.SubjectExecutionSucceeded}
	var seen []string
	for len(seen) < len(want) || pending(sub) > 0 {
		m, err := sub.NextMsg(30 * time.Second)
		require.NoError(t, err, "after %v", seen)
		var ev wire.Event
		require.NoError(t, json.Unmarshal(m.Data, &ev), "%s: %s", m.Subject, m.Data)
		assert.Equal(t, wire.EventVersion, ev.V, "%s: %s", m.Subject, m.Data)
		assert.Equal(t, m.Subject, ev.Type, "an event on %s", m.Subject)
		seen = append(seen, m.Subject)
	}
	assert.Equal(t, want, seen, "only the call's events, once each")
}

// pending is how many messages sub holds that were not read yet.
func pending(sub *nats.Subscription) int {
	n, _, _ := sub.Pending()
	return n
}

// TestEvents_SubscribersSeeSecretsMasked: an event on TOOL_EVENTS carries
// the call's arguments with their secrets masked, as approvers and
// viewers read them; the caller, on its own subject, hears its call as
// it submitted it; a call with no secret is published as it is.
func TestEvents_SubscribersSeeSecretsMasked(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default:\n  requiresApprovalTools: [connect]\n"})
	ctx := t.Context()
	events, err := g.NC.SubscribeSync(wire.SubjectApprovalRequired)
	require.NoError(t, err)
	own, err := g.NC.SubscribeSync(wire.EntrySubject("bot", ">"))
	require.NoError(t, err)
	require.NoError(t, g.NC.Flush())

	for _, c := range []struct{ id, args, event string }{
		{"secret", `{"password":"hunter2","host":"db"}`, `{"password":"[redacted]","host":"db"}`},
		{"plain", `{"host":"db"}`, `{"host":"db"}`},
	} {
		_, err := g.Client.Submit(ctx, machine.Call{ToolCallID: c.id, ToolName: "connect", Arguments: json.RawMessage(c.args), CallerBotID: "bot", ConversationID: "masked"})
		require.NoError(t, err)
		for sub, want := range map[*nats.Subscription]string{events: c.event, own: c.args} {
			m, err := sub.NextMsg(30 * time.Second)
			require.NoError(t, err, "%s on %s", c.id, sub.Subject)
			var ev wire.Event
			require.NoError(t, json.Unmarshal(m.Data, &ev))
			assert.JSONEq(t, want, string(ev.Entry.ToolArguments), "%s on %s", c.id, m.Subject)
			assert.Equal(t, want != c.args, ev.Entry.SecretsMasked, "%s on %s: marked masked", c.id, m.Subject)
		}
	}
}

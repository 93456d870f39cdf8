package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestServe_NotifierWithoutIntakeFollowsThePolicy runs the notifier in a
// process of its own, without the intake role that would otherwise keep
// the policy engine current: a channel added to the stored policy after it
// started is still told of the next call.
func TestServe_NotifierWithoutIntakeFollowsThePolicy(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 100)
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- body
	}))
	t.Cleanup(slack.Close)

	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}})
	toolgatetest.Start(t, g.Sibling("notifier"))
	js := g.JS
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the notifier's consumer appeared", func() (bool, any) {
		_, err := js.Consumer(t.Context(), wire.EventsStream, worker.NotifierDurable)
		return err == nil, err
	})

	policies, err := js.KeyValue(t.Context(), wire.PoliciesBucket)
	require.NoError(t, err)
	doc, err := policy.Parse(fmt.Appendf(nil, "default:\n  notify: [{type: slack, url: %q}]\n  inboxUrl: https://toolgate.example\n", slack.URL))
	require.NoError(t, err)
	require.NoError(t, stores.NewPolicyStore(js, policies).Set(t.Context(), doc))

	kv, err := js.KeyValue(t.Context(), wire.CallsBucket)
	require.NoError(t, err)
	m := machine.New(bus.NewKVStore(js, kv), machine.WithEvaluator(machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
		return machine.Verdict{Action: machine.ActionAsk, Reason: "test asks"}, nil
	})))
	// The policy reaches the notifier by a KV watch, a moment after Set:
	// a call before then names no channel. Ask until one is told of.
	var body []byte
	for i := 0; body == nil; i++ {
		_, err := m.Submit(t.Context(), machine.Call{ToolCallID: fmt.Sprint("c", i), ToolName: "deploy", CallerBotID: "bot", ConversationID: "notify"})
		require.NoError(t, err)
		select {
		case body = <-got:
		case <-time.After(200 * time.Millisecond):
			require.Less(t, i, 150, "the notifier never used the channel added to the policy")
		}
	}
	var msg struct{ Text string }
	require.NoError(t, json.Unmarshal(body, &msg))
	assert.Contains(t, msg.Text, "Approval needed: deploy")
	assert.Contains(t, msg.Text, "https://toolgate.example/#/calls/notify.c")
}
